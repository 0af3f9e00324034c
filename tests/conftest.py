"""Shared fixtures: the tiny model most measurement tests run on.

``TINY`` is its config (vocab 64, d_model 32, 4 heads, 3 layers, learned positions up to 64
tokens): small enough to compile in a second, deep enough to have relay (layers >= 2).
``make_tiny(seed=0, **overrides)`` builds a ``Transformer`` of it with any field changed.
Tests that need another architecture on purpose (a reference implementation's case list, a
closed form that needs one head) build their own and say why.
"""

import pytest
from flax import nnx

import nohair_jax as nh

TINY = dict(vocab_size=64, d_model=32, n_heads=4, n_layers=3, max_len=64)


@pytest.fixture
def tiny_config() -> nh.TransformerConfig:
    return nh.TransformerConfig(**TINY)


@pytest.fixture
def make_tiny():
    def make(seed: int = 0, **overrides) -> nh.Transformer:
        return nh.Transformer(nh.TransformerConfig(**{**TINY, **overrides}), rngs=nnx.Rngs(seed))
    return make
