"""Direct read versus relay: exact at layer 1, pure dilution under uniform attention."""


import numpy as np
import pytest

import nohair_jax as nh
from nohair_jax.direct_relay import direct_relay_split

def test_layer_one_has_no_relay_and_parts_obey_the_triangle_inequality(make_tiny):
    model = make_tiny()
    pairs = nh.random_prompt_pairs(0, 3, 6, 30, model.config.vocab_size)
    split = direct_relay_split(model, *pairs, float64=True)
    off = nh.prompt_pair_offsets(model, *pairs, float64=True)
    np.testing.assert_allclose(split.total, off.l2, rtol=1e-12)
    assert np.all(split.relay[:, :2] == 0)  # layer 0 and 1: nothing relayed yet
    np.testing.assert_array_equal(split.direct[:, 1], split.total[:, 1])
    assert np.all(split.relay[:, 2:] > 0)
    assert np.all(split.total <= split.direct + split.relay + 1e-15)


def test_uniform_attention_direct_part_is_pure_dilution(make_tiny):
    """Zero query/key weights and no MLP: the direct part at every layer is const / (P + t),
    while the relay part grows relative to it (the log factors)."""
    model = make_tiny(1)
    for block in model.blocks:
        for lin in (block.attn.q, block.attn.k, block.mlp.down):
            lin.kernel[...] = 0 * lin.kernel[...]
            lin.bias[...] = 0 * lin.bias[...]
    P, T = 5, 50
    split = direct_relay_split(model, *nh.random_prompt_pairs(2, 2, P, T, model.config.vocab_size), float64=True)
    n = P + split.t
    for layer in range(1, model.config.n_layers + 1):
        scaled = split.direct[:, layer] * n
        np.testing.assert_allclose(scaled, scaled[:, :1] * np.ones_like(scaled), rtol=1e-10)
    relay_scaled = split.relay[:, 2:] * n
    assert np.all(np.diff(relay_scaled, axis=-1) > 0)


def test_unequal_prompts_are_refused(make_tiny):
    model = make_tiny(position="rope")
    a, b, c = nh.random_prompt_pairs(0, 2, 6, 10, model.config.vocab_size)
    with pytest.raises(ValueError, match="equal length, got 6 and 5"):
        direct_relay_split(model, a, b[:, :5], c)
