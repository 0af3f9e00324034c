"""The public names of ``nohair_jax``, for editors and type checkers, and the one list of them:
``nohair_jax/__init__.py`` reads these imports to resolve each name on first use (so that
``import nohair_jax`` and ``nohair --help`` load no JAX)."""

from nohair_jax.bound import (
    BoundConditions as BoundConditions, BoundNotApplicable as BoundNotApplicable, BoundQuantities as BoundQuantities,
    check_bound as check_bound,
    measure_conditions as measure_conditions,
)
from nohair_jax.chat import (
    ChatTemplate as ChatTemplate, chat_template as chat_template, system_prompt_pairs as system_prompt_pairs,
)
from nohair_jax.checkpoints import CheckpointError as CheckpointError, load_checkpoint as load_checkpoint
from nohair_jax.config import (
    BlockLayout as BlockLayout, PromptLogitBias as PromptLogitBias, RopeScaling as RopeScaling,
    TransformerConfig as TransformerConfig,
    default_config as default_config,
)
from nohair_jax.data import (
    Corpus as Corpus, decode as decode, encode as encode, heldout_prompt_pairs as heldout_prompt_pairs,
    load_corpus as load_corpus, markov_corpus as markov_corpus, stdlib_corpus as stdlib_corpus,
)
from nohair_jax.calibrated_relay import (
    CalibratedRelay as CalibratedRelay, calibrate_relay as calibrate_relay, dilution_relay as dilution_relay,
)
from nohair_jax.card import make_card as make_card, measure_card as measure_card, read_card as read_card
from nohair_jax.direct_relay import PathSplit as PathSplit, direct_relay_split as direct_relay_split
from nohair_jax.fit import (
    AlphaDifference as AlphaDifference, ExponentRise as ExponentRise, FitRefused as FitRefused, HalfLife as HalfLife,
    NoiseFloorError as NoiseFloorError, PowerLawFit as PowerLawFit, PowerLawTolerance as PowerLawTolerance,
    alpha_difference as alpha_difference, alpha_table as alpha_table,
    paired_alpha_difference as paired_alpha_difference, alpha_vs_window as alpha_vs_window,
    alphas as alphas, bonferroni as bonferroni, bootstrap_indices as bootstrap_indices,
    difference_or_refuse as difference_or_refuse, fit_from_dict as fit_from_dict, fit_layers as fit_layers,
    fit_or_refuse as fit_or_refuse, fit_power_law as fit_power_law, kl_half_life as kl_half_life,
    local_exponent as local_exponent, local_exponent_rise as local_exponent_rise,
    noise_floor_curve as noise_floor_curve, power_law_tolerance as power_law_tolerance, quarter_rise as quarter_rise,
    summary_curve as summary_curve, t_interval as t_interval,
)
from nohair_jax.jacobian import LinearResponse as LinearResponse, linear_response as linear_response
from nohair_jax.measurement import Measurement as Measurement, Pooled as Pooled, measure as measure, pool as pool
from nohair_jax.model import (
    ForwardOutput as ForwardOutput, Probe as Probe, Sublayers as Sublayers,
    Transformer as Transformer, untrained_model as untrained_model,
)
from nohair_jax.offsets import (
    Offsets as Offsets, measure_noise_floor as measure_noise_floor, pair_offsets as pair_offsets,
    prompt_pair_offsets as prompt_pair_offsets, sweep_mesh as sweep_mesh, sweep_offsets as sweep_offsets,
)
from nohair_jax.pairs import (
    PromptPairs as PromptPairs, random_prompt_pairs as random_prompt_pairs, text_prompt_pairs as text_prompt_pairs,
)
from nohair_jax.sinks import (
    FirstKeysShare as FirstKeysShare, LaterQueriesShare as LaterQueriesShare, dilution_share as dilution_share,
    key_attention as key_attention, sink_attention as sink_attention,
)
from nohair_jax.sweep import SweepGrid as SweepGrid, draw_sweep as draw_sweep, run_sweep as run_sweep
from nohair_jax.system_prompts import measure_system_prompts as measure_system_prompts
from nohair_jax.tokenization import (
    sequence_start as sequence_start, text_continuations as text_continuations, tokenize as tokenize, tokenized_prompt_pairs as tokenized_prompt_pairs,
)
from nohair_jax.training_steps import (
    StepResult as StepResult, TrainingCheckpoint as TrainingCheckpoint, TrainingSteps as TrainingSteps,
    measure_training_steps as measure_training_steps, plan_training_steps as plan_training_steps,
)
from nohair_jax.train import (
    TrainConfig as TrainConfig, TrainResult as TrainResult, alpha_history as alpha_history,
    load_trained as load_trained, offsets_callback as offsets_callback,
)
from nohair_jax import bound as bound, card as card, data as data, direct_relay as direct_relay, dynamics as dynamics
from nohair_jax import relay as relay, sweep as sweep, train as train

__version__: str
