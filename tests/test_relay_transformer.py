"""A transformer built to be the linear relay model reproduces nohair_jax.relay.

Zero query and key weights make every attention layer a uniform causal average; values and
output are scaled identities, there is no MLP, bias or position encoding. All tokens embed to
almost the same vector c, and the two prompts differ along a direction u orthogonal to c and to
the all-ones vector, where LayerNorm acts as 1 / sigma_l. To first order in the embedding
differences (1e-6 here) the offsets then follow the relay recursion with residual (a = 1) and
direct = relay = s / sigma_l at layer l, with sigma_l the norm's measured input scale.
"""

import numpy as np
import pytest
from flax import nnx

import nohair_jax as nh

D_MODEL, P, T, EPS, S = 8, 4, 60, 1e-6, 0.7


def relay_transformer(depth):
    cfg = nh.TransformerConfig(vocab_size=3, d_model=D_MODEL, n_heads=1, n_layers=depth, position="none",
                               bias=False, max_len=P + T)
    model = nh.Transformer(cfg, rngs=nnx.Rngs(0))
    c = np.zeros(D_MODEL)
    c[:2] = [1.0, -1.0]
    u = np.zeros(D_MODEL)
    u[2:4] = [1.0, -1.0]  # orthogonal to c and to the all-ones vector
    model.embed.embedding[...] = np.stack([c, c + EPS * u, c - EPS * u]).astype(np.float32)
    for block in model.blocks:
        attn = block.attn
        attn.q.kernel[...] = 0 * attn.q.kernel[...]
        attn.k.kernel[...] = 0 * attn.k.kernel[...]
        attn.v.kernel[...] = np.eye(D_MODEL, dtype=np.float32)
        attn.o.kernel[...] = S * np.eye(D_MODEL, dtype=np.float32)
        block.mlp.down.kernel[...] = 0 * block.mlp.down.kernel[...]
    return model, 2 * EPS * np.linalg.norm(u)


@pytest.mark.parametrize("depth", [1, 3])
def test_transformer_follows_the_relay_recursion(depth):
    model, prompt_offset = relay_transformer(depth)
    a, b, c = np.ones((1, P), np.int32), np.full((1, P), 2, np.int32), np.zeros((1, T), np.int32)
    measured = nh.prompt_pair_offsets(model, a, b, c, float64=True).l2[0]
    # sigma_l: the input scale of block l's attention norm (the same at every position to O(EPS)).
    sigma = np.asarray(model(np.concatenate([a, c], 1), probe=nh.BoundQuantities()).norms)[0:2 * depth:2, 0, -1]
    gain = S / sigma
    predicted = np.asarray(nh.relay.offsets(P, T, depth, residual=1.0, direct=gain, relay=gain, prompt_offset=prompt_offset))
    np.testing.assert_allclose(measured[1:], predicted[1:], rtol=1e-4)
    assert np.all(measured[0] == 0)
    # Layer 1 is pure dilution, P * D_0 * gain / (P + t): exact up to the first-order approximation.
    t = np.arange(1, T + 1)
    np.testing.assert_allclose(measured[1], P * prompt_offset * gain[0] / (P + t), rtol=1e-4)


def test_unit_gain_is_the_solvable_model_shape():
    """With gain 1 at every layer the prediction is the exactly solvable model with residual,
    whose shape (offset divided by its value at t = T) the transformer reproduces."""
    depth = 3
    model, prompt_offset = relay_transformer(depth)
    a, b, c = np.ones((1, P), np.int32), np.full((1, P), 2, np.int32), np.zeros((1, T), np.int32)
    tokens = np.concatenate([a, c], 1)
    for layer, block in enumerate(model.blocks):  # gain 1: output scale = the norm's input scale,
        # set layer by layer because each choice changes the scales above it
        sigma = np.asarray(model(tokens, probe=nh.BoundQuantities()).norms)[2 * layer, 0, -1]
        block.attn.o.kernel[...] = (sigma * np.eye(D_MODEL)).astype(np.float32)
    measured = nh.prompt_pair_offsets(model, a, b, c, float64=True).l2[0]
    exact = nh.relay.offsets_exact(P, T, depth, residual=True)
    for layer in range(1, depth + 1):
        shape = measured[layer] / measured[layer][-1]
        expected = np.array([float(x / exact[layer][-1]) for x in exact[layer]])
        np.testing.assert_allclose(shape, expected, rtol=1e-4)
