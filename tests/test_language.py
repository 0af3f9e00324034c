"""nohair_jax.language against closed forms: uniform logits have perplexity V exactly, and greedy
decoding picks the argmax of the model's own forward pass."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import nohair_jax as nh
from nohair_jax.language import greedy_continuation, perplexity


def _tiny(seed=0, vocab=97):
    cfg = nh.TransformerConfig(vocab_size=vocab, d_model=32, n_heads=2, n_layers=2, position="rope", max_len=64)
    return nh.Transformer(cfg, rngs=nnx.Rngs(seed))


def test_uniform_logits_give_perplexity_equal_to_the_vocabulary():
    model = _tiny()
    model.embed.embedding[...] = jnp.zeros_like(model.embed.embedding[...])  # tied: every logit is 0
    tokens = np.random.default_rng(0).integers(0, 97, (2, 20))
    assert perplexity(model, tokens) == pytest.approx(97.0, rel=1e-6)


def test_perplexity_is_exp_of_the_mean_cross_entropy():
    model = _tiny(1)
    tokens = np.random.default_rng(1).integers(0, 97, (1, 12))
    logits = np.asarray(model(jnp.asarray(tokens)).logits, np.float64)[0, :-1]
    logp = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) - logits.max(-1, keepdims=True)
    expected = np.exp(-np.mean(logp[np.arange(11), tokens[0, 1:]]))
    assert perplexity(model, tokens) == pytest.approx(expected, rel=1e-4)
    with pytest.raises(ValueError, match="length >= 2"):
        perplexity(model, tokens[:, :1])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        perplexity(model, np.full((1, 4), 97))


def test_greedy_continuation_appends_the_argmax_each_step():
    model = _tiny(2)
    prompt = np.array([5, 9, 11])
    new = greedy_continuation(model, prompt, 4)
    seq = list(prompt)
    with jax.default_matmul_precision("highest"):
        for _ in range(4):
            seq.append(int(np.argmax(np.asarray(model(jnp.asarray([seq])).logits[0, -1]))))
    np.testing.assert_array_equal(new, seq[3:])
