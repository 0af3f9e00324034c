"""nohair_jax.layer_measures: the residual stream split by sublayer, the attention bound, the
consensus measures of a model's tokens layer by layer."""

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from nohair_jax import layer_measures as lm
from nohair_jax.model import Attention, RopeScaling, Transformer, TransformerConfig



@pytest.mark.parametrize("position, kv_heads, scaling", [
    ("rope", None, None), ("rope", 2, RopeScaling("linear", 4.0)), ("learned", 1, None),
])
def test_sublayer_outputs_add_up_to_the_residual_stream(position, kv_heads, scaling):
    cfg = TransformerConfig(d_model=32, n_heads=4, n_kv_heads=kv_heads, n_layers=2, position=position, max_len=16,
                            rope_scaling=scaling)
    model = Transformer(cfg, rngs=nnx.Rngs(0))
    tokens = jnp.asarray(np.random.default_rng(0).integers(0, 256, (2, 16)))
    hidden, attn, mlp = lm.sublayer_outputs(model, tokens)
    assert attn.shape == mlp.shape == (2, 2, 16, 32)
    # the sublayer outputs themselves are checked against the numpy reference in test_model.py
    np.testing.assert_allclose(np.asarray(hidden[1:]), np.asarray(hidden[:-1] + attn + mlp), atol=1e-6)
    # the attention bound holds for every token of every layer
    for layer, block in enumerate(model.blocks):
        bound = lm.attention_bound(block.attn, block.attn_norm(hidden[layer])[0])
        assert np.all(np.linalg.norm(np.asarray(attn[layer]), axis=-1).max(-1) <= np.asarray(bound) * (1 + 1e-5))


def test_attention_bound_is_tight_for_one_head_and_one_token():
    # one token attends to itself: the output is y Wv Wo, largest along Wv Wo's top singular direction
    cfg = TransformerConfig(d_model=8, n_heads=1, n_layers=1, bias=False)
    attn = Attention(cfg, rngs=nnx.Rngs(3))
    m = np.asarray(attn.v.kernel[...]) @ np.asarray(attn.o.kernel[...])
    u, s, vt = np.linalg.svd(m.T)  # rows of m.T act on y as y m
    y = jnp.asarray(2.0 * vt[0])[None, None, :]
    out = attn(y, None)[0]
    bound = float(lm.attention_bound(attn, y)[0])
    assert bound == pytest.approx(2.0 * s[0], rel=1e-5)
    assert float(jnp.linalg.norm(out)) == pytest.approx(bound, rel=1e-4)


def test_layer_measures_at_exact_consensus():
    # no positions and one repeated byte: every token's stream is the same vector at every layer
    cfg = TransformerConfig(d_model=32, n_heads=2, n_layers=3, position="none")
    model = Transformer(cfg, rngs=nnx.Rngs(1))
    same = lm.layer_measures(model, jnp.full((2, 12), 65), tol=0.1)
    assert same["sphere_diameter"].shape == (4, 2) and same["attn_norm"].shape == (3, 2)
    np.testing.assert_allclose(same["sphere_diameter"], 0.0, atol=1e-5)
    np.testing.assert_allclose(same["mean_cosine"], 1.0, atol=1e-5)
    np.testing.assert_array_equal(same["clusters"], 1)
    mixed = lm.layer_measures(model, jnp.asarray(np.arange(24).reshape(2, 12) * 7), tol=0.1)
    np.testing.assert_array_equal(mixed["clusters"][0], 12)  # distinct bytes: distinct embeddings
    assert np.all(mixed["sphere_diameter"] > 0.5)
