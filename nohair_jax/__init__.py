"""nohair_jax: how long a prompt keeps steering a transformer, measured, fitted and explained.

    import nohair_jax as nh
    from flax import nnx
    cfg = nh.TransformerConfig(vocab_size=256, d_model=128, n_heads=4, n_layers=4)
    model = nh.Transformer(cfg, rngs=nnx.Rngs(0))
    off = nh.prompt_pair_offsets(model, prompts_a, prompts_b, continuations)
    fit = nh.fit_power_law(off.t, off.l2[:, -1, :])
    fit.alpha, fit.ci, fit.t_range
"""

from nohair_jax import relay
from nohair_jax.fit import (
    NoiseFloorError,
    PowerLawFit,
    alpha_vs_window,
    fit_power_law,
    local_exponent,
    noise_floor_curve,
    summary_curve,
)
from nohair_jax.model import Diagnostics, ForwardOutput, PromptLogitBias, Transformer, TransformerConfig
from nohair_jax.offsets import Offsets, measure_noise_floor, pair_offsets, prompt_pair_offsets
from nohair_jax.pairs import PromptPairs, random_prompt_pairs, text_prompt_pairs

__version__ = "0.1.0"

__all__ = [
    "Diagnostics",
    "ForwardOutput",
    "NoiseFloorError",
    "Offsets",
    "PowerLawFit",
    "PromptLogitBias",
    "PromptPairs",
    "Transformer",
    "TransformerConfig",
    "alpha_vs_window",
    "fit_power_law",
    "local_exponent",
    "measure_noise_floor",
    "noise_floor_curve",
    "pair_offsets",
    "prompt_pair_offsets",
    "random_prompt_pairs",
    "relay",
    "summary_curve",
    "text_prompt_pairs",
]
