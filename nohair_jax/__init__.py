"""nohair_jax: how long a prompt keeps steering a transformer, measured, fitted and explained.

    import nohair_jax as nh
    from flax import nnx
    cfg = nh.TransformerConfig(vocab_size=256, d_model=128, n_heads=4, n_layers=4)
    model = nh.Transformer(cfg, rngs=nnx.Rngs(0))
    off = nh.prompt_pair_offsets(model, prompts_a, prompts_b, continuations)
    fit = nh.fit_power_law(off.t, off.l2[:, -1, :])
    fit.alpha, fit.ci, fit.t_range
"""

from nohair_jax import bound, data, dynamics, paths, relay, sweep, train
from nohair_jax.bound import BoundConditions, BoundNotApplicable, check_bound, measure_conditions
from nohair_jax.checkpoints import CheckpointError, load_checkpoint
from nohair_jax.data import Corpus, decode, encode, heldout_prompt_pairs, load_corpus, markov_corpus, stdlib_corpus
from nohair_jax.fit import (
    AlphaDifference,
    HalfLife,
    NoiseFloorError,
    PowerLawFit,
    alpha_difference,
    alpha_vs_window,
    bootstrap_indices,
    compare_decay_laws,
    fit_power_law,
    kl_half_life,
    local_exponent,
    noise_floor_curve,
    summary_curve,
)
from nohair_jax.model import Diagnostics, ForwardOutput, PromptLogitBias, RopeScaling, Transformer, TransformerConfig
from nohair_jax.offsets import Offsets, measure_noise_floor, pair_offsets, prompt_pair_offsets
from nohair_jax.pairs import PromptPairs, random_prompt_pairs, text_prompt_pairs
from nohair_jax.paths import PathSplit, direct_relay_split
from nohair_jax.sweep import SweepGrid, draw_sweep, run_sweep, sweep_mesh, sweep_offsets
from nohair_jax.train import TrainConfig, TrainResult, alpha_history, load_trained, offsets_callback

__version__ = "0.1.0"

__all__ = [
    "AlphaDifference",
    "BoundConditions",
    "BoundNotApplicable",
    "CheckpointError",
    "Corpus",
    "Diagnostics",
    "HalfLife",
    "ForwardOutput",
    "NoiseFloorError",
    "Offsets",
    "PathSplit",
    "PowerLawFit",
    "PromptLogitBias",
    "PromptPairs",
    "RopeScaling",
    "SweepGrid",
    "TrainConfig",
    "TrainResult",
    "Transformer",
    "TransformerConfig",
    "alpha_difference",
    "alpha_history",
    "alpha_vs_window",
    "bootstrap_indices",
    "bound",
    "check_bound",
    "compare_decay_laws",
    "data",
    "dynamics",
    "decode",
    "direct_relay_split",
    "draw_sweep",
    "encode",
    "fit_power_law",
    "heldout_prompt_pairs",
    "kl_half_life",
    "load_checkpoint",
    "load_corpus",
    "load_trained",
    "local_exponent",
    "markov_corpus",
    "measure_conditions",
    "measure_noise_floor",
    "noise_floor_curve",
    "offsets_callback",
    "pair_offsets",
    "paths",
    "prompt_pair_offsets",
    "random_prompt_pairs",
    "relay",
    "run_sweep",
    "stdlib_corpus",
    "summary_curve",
    "sweep",
    "sweep_mesh",
    "sweep_offsets",
    "text_prompt_pairs",
    "train",
]
