"""Attention sinks against the dilution closed form."""

import numpy as np
import pytest

from nohair_jax.sinks import dilution_share, sink_attention


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
    with pytest.raises(ValueError, match="from_query must be in"):
        sink_attention(model, tokens, from_query=40)
