"""Attention sinks against the dilution closed form."""

import numpy as np
import pytest

from nohair_jax.sinks import dilution_share, key_attention, sink_attention


def test_sink_attention_is_the_dilution_share_when_attention_only_dilutes(make_tiny):
    """Queries zeroed: every logit is 0, so key 0 gets exactly 1 / (i + 1) at query i; random
    weights do not (the measure reads the model, not the closed form)."""
    tokens = np.random.default_rng(0).integers(0, 64, (2, 40))
    model = make_tiny(position="rope")
    want = dilution_share(40, keys=2, from_query=10)
    np.testing.assert_allclose(want, np.mean(2 / np.arange(11, 41)), rtol=1e-15)
    assert not np.allclose(sink_attention(model, tokens, keys=2, from_query=10), want, rtol=1e-3)
    for blk in model.blocks:
        blk.attn.q.kernel[...] = 0.0
        blk.attn.q.bias[...] = 0.0
    got = sink_attention(model, tokens, keys=2, from_query=10)
    assert got.shape == (3, 4)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    by_query = sink_attention(model, tokens, keys=2, from_query=10, by_query=True)
    assert by_query.shape == (3, 4, 30)
    np.testing.assert_allclose(by_query, np.broadcast_to(2 / np.arange(11, 41), (3, 4, 30)), rtol=1e-6)
    with pytest.raises(ValueError, match="from_query must be in"):
        sink_attention(model, tokens, from_query=40)


def test_key_attention_against_dilution_and_the_first_keys_share(make_tiny):
    """Zeroed queries: every key j < T // 2 gets the dilution share, a later key the mean of [i >= j] / (i + 1)
    over the queries i >= T // 2 (closed forms); with random weights each query's row still sums to 1,
    and the first keys' total is ``sink_attention``'s (two readings of one forward pass)."""
    length = 40
    tokens = np.random.default_rng(1).integers(0, 64, (2, length))
    model = make_tiny(position="rope")
    got = key_attention(model, tokens)
    assert got.shape == (3, 2, 4, length)
    np.testing.assert_allclose(got.sum(-1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(got[..., :3].sum(-1).mean(axis=1), sink_attention(model, tokens, keys=3), rtol=1e-6)
    assert not np.allclose(got[..., 0], dilution_share(length), rtol=1e-3)
    for blk in model.blocks:
        blk.attn.q.kernel[...] = 0.0
        blk.attn.q.bias[...] = 0.0
    got = key_attention(model, tokens)
    i = np.arange(length // 2, length)
    want = np.array([np.mean((i >= j) / (i + 1)) for j in range(length)])
    np.testing.assert_allclose(want[: length // 2], dilution_share(length), rtol=1e-12)
    np.testing.assert_allclose(got, np.broadcast_to(want, got.shape), rtol=1e-6)
