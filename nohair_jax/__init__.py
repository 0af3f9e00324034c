"""nohair_jax: how long a prompt keeps steering a transformer, measured, fitted and explained.

    import nohair_jax as nh
    from flax import nnx
    cfg = nh.TransformerConfig(vocab_size=256, d_model=128, n_heads=4, n_layers=4)
    model = nh.Transformer(cfg, rngs=nnx.Rngs(0))
    off = nh.prompt_pair_offsets(model, prompts_a, prompts_b, continuations)
    fit = nh.fit_power_law(off.t, off.l2[:, -1, :])
    fit.alpha, fit.ci, fit.t_range

Every definition, and the names, shapes and units the docstrings use (N pairs, L blocks, t = 1..T
at index P + t - 1, offsets [N, L+1, T] in the units of h, KL in nats), is in docs/definitions.md;
the conventions in its section #conventions.
"""

import importlib

# Public name -> the module that defines it. Imported on first use (PEP 562), so that
# ``import nohair_jax`` and ``nohair --help`` do not load JAX, Flax, optax, sympy or matplotlib.
_EXPORTS = {
    "bound": ("BoundConditions", "BoundNotApplicable", "check_bound", "measure_conditions"),
    "checkpoints": ("CheckpointError", "load_checkpoint"),
    "config": ("PromptLogitBias", "RopeScaling", "TransformerConfig", "default_config"),
    "data": ("Corpus", "decode", "encode", "heldout_prompt_pairs", "load_corpus", "markov_corpus", "stdlib_corpus"),
    "fit": ("AlphaDifference", "FitRefused", "HalfLife", "NoiseFloorError", "PowerLawFit", "PowerLawTolerance",
            "alpha_difference", "alpha_table", "alpha_vs_window", "alphas", "bonferroni", "bootstrap_indices",
            "difference_or_refuse", "fit_from_dict", "fit_layers", "fit_or_refuse", "fit_power_law", "kl_half_life",
            "local_exponent", "noise_floor_curve", "power_law_tolerance", "summary_curve", "t_interval", "ExponentRise",
            "local_exponent_rise", "quarter_rise"),
    "model": ("Diagnostics", "ForwardOutput", "Transformer", "untrained_model"),
    "measurement": ("Measurement", "Pooled", "measure", "pool"),
    "offsets": ("Offsets", "measure_noise_floor", "pair_offsets", "prompt_pair_offsets", "sweep_mesh", "sweep_offsets"),
    "pairs": ("PromptPairs", "random_prompt_pairs", "text_prompt_pairs"),
    "sinks": ("dilution_share", "key_attention", "sink_attention"),
    "direct_relay": ("PathSplit", "direct_relay_split"),
    "sweep": ("SweepGrid", "draw_sweep", "run_sweep"),
    "tokenization": ("text_continuations", "tokenize", "tokenized_prompt_pairs"),
    "train": ("TrainConfig", "TrainResult", "alpha_history", "held_out_plateau", "load_trained", "offsets_callback"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}
_SUBMODULES = ("bound", "data", "direct_relay", "dynamics", "relay", "sweep", "train")

__version__ = "0.1.0"
__all__ = sorted([*_MODULE_OF, *_SUBMODULES])


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f"nohair_jax.{name}")
    if name not in _MODULE_OF:
        raise AttributeError(f"module 'nohair_jax' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"nohair_jax.{_MODULE_OF[name]}"), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return __all__
