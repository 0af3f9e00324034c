"""One model measured at several checkpoints along its training (docs/definitions.md#training-steps).

``measure_training_steps(sources)`` runs the same prompt pairs through every checkpoint and returns,
per checkpoint in order of training step: alpha per layer with its interval (``measurement.measure``,
the pipeline of ``nohair offsets``), the next-token KL's half-life (``fit.kl_half_life``) and the
no-hair bound's conditions with its explicit check (``bound.measure_conditions``, ``bound.explicit_bounds``,
``bound.explicit_check``: what ``nohair bound`` measures). ``nohair steps`` is its command line.

A source is one of:

    a Hugging Face folder, a GGUF file or a packaged name (``checkpoints.load_checkpoint``): its step
        is read from its name (``step8000``, ``step-8000``, ``global_step8000``: Pythia's revision
        folders), or given;
    a training run folder of ``train.train`` (``nohair train --out RUN``): every checkpoint it keeps,
        ``RUN/checkpoints/<step>``, each at its orbax step;
    one checkpoint of such a run, ``RUN/checkpoints/<step>``: that step.

Every checkpoint is planned (``plan_training_steps``: step, config, vocabulary, training context) and
checked before any weight is read: a source without a step, one checkpoint given twice, two
checkpoints at one step, checkpoints that are not one network (architecture, widths) or do not share a
vocabulary, a sequence longer than a checkpoint computes, or a folder whose weights cannot be read
(an empty or unfinished step folder) are refused in one line naming the checkpoints. A measurement
longer than a checkpoint's training context is warned and recorded in steps.json.
"""

from __future__ import annotations

import dataclasses
import re
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

from nohair_jax.bound import (
    BoundConditions, ExplicitCheck, NotApplicable, explicit_from_saved, explicit_result, measure_conditions,
)
from nohair_jax.checkpoints import (
    checked_config, load_model, read_config, resolve_checkpoint, tensor_headers, tokenizer_or_warning, weight_files,
)
from nohair_jax.checkpoints.families import CONFIG_FILE
from nohair_jax.config import TransformerConfig
from nohair_jax.figures import MOST_LAYERS_DRAWN, drawn_layers, layer_colors, plain_log_ticks
from nohair_jax.fit import FitRefused, HalfLife, PowerLawFit, alpha_table, alphas, fit_from_dict, kl_half_life
from nohair_jax.measurement import measure
from nohair_jax.pairs import PromptPairs, random_prompt_pairs, text_prompt_pairs
from nohair_jax.results import jsonable, load_json, save_figure, save_json, written_together
from nohair_jax.tokenization import sequence_start, tokenize

BYTES = "UTF-8 bytes"  # the tokenizer of the project's own training runs (``data.encode``)
# TransformerConfig fields that leave the network a checkpoint's weights run in unchanged: how the
# weights were first drawn, how they are stored (a revision saved in float16 is the same network), and
# the vocabulary (compared with the tokenizers, which say more).
_NOT_THE_NETWORK = ("init_std", "scaled_residual_init", "dtype", "vocab_size")
_STEP_IN_NAME = re.compile(r"(?:^|[^a-z0-9])(?:global_)?step[-_]?(\d+)(?![0-9])", re.IGNORECASE)


@dataclasses.dataclass(frozen=True)
class TrainingCheckpoint:
    """One planned checkpoint: where it is, its training step, its config; no weight read yet.

    source: the name it is known by (a run's checkpoints as ``RUN/checkpoints/<step>``); path: the
    resolved file or folder (a run's: its ``RUN/checkpoints/<step>``); step: its training step; step_from: "name"
    (read from the source's name), "run" (the orbax step of a training run) or "given";
    run: whether it is a training run's checkpoint (``train.load_trained``); config: its
    ``TransformerConfig``; context: the sequence length it was trained at (a run's ``TrainConfig.context``;
    a Hugging Face or GGUF checkpoint's ``max_len``: its position table or ``max_position_embeddings``), None
    where a run does not say; vocabulary: what its tokens mean, for comparing checkpoints (``BYTES`` for a
    training run, a tokenizer's ``{token: id}``, or None where a folder has no tokenizer).
    """

    source: str
    path: Path
    step: int
    step_from: str
    run: bool
    config: TransformerConfig
    context: int | None = None
    vocabulary: str | dict | None = dataclasses.field(default=None, repr=False, compare=False)
    tokenizer: object = dataclasses.field(default=None, repr=False, compare=False)

    def load(self, seq_len: int | None = None):
        """The checkpoint's ``Transformer`` (``train.load_trained`` or ``checkpoints.load_model`` with
        ``seq_len``; the tokenizer was read when it was planned)."""
        if self.run:
            from nohair_jax.train import load_trained

            return load_trained(self.path.parent.parent, step=int(self.path.name))  # the step on disk, not a given one
        return load_model(self.path, seq_len=seq_len)


def step_in_name(name: str) -> int | None:
    """The training step a checkpoint's name carries (``step8000``, ``pythia-70m-step8000.gguf``,
    ``global_step8000``, case ignored), or None where it carries none; ValueError where it carries two."""
    found = {int(m) for m in _STEP_IN_NAME.findall(name)}
    if len(found) > 1:
        raise ValueError(f"checkpoint name {name!r} carries several steps ({', '.join(map(str, sorted(found)))}); "
                         "give every checkpoint's step (--steps)")
    return found.pop() if found else None


def _run_folder(path: Path) -> bool:
    """Whether ``path`` is a training run folder of ``train.train``: config.json with model and train
    settings, and a checkpoints folder."""
    if not (path.is_dir() and (path / "checkpoints").is_dir() and (path / CONFIG_FILE).is_file()):
        return False
    try:
        saved = load_json(path / CONFIG_FILE)
    except (ValueError, UnicodeDecodeError):
        return False
    return isinstance(saved, dict) and isinstance(saved.get("model"), dict) and "train" in saved


def _run_steps(run: Path) -> list[int]:
    """The steps a run keeps: its checkpoint folders named by a step (orbax writes a step under a
    temporary name and renames it when complete)."""
    return sorted(int(p.name) for p in (run / "checkpoints").iterdir() if p.is_dir() and p.name.isdigit())


def _run_context(run: Path) -> int | None:
    """The sequence length a training run trained at (its config.json's ``train.context``), None where
    it holds none."""
    train = load_json(run / CONFIG_FILE).get("train")
    context = train.get("context") if isinstance(train, dict) else None
    return context if isinstance(context, int) and not isinstance(context, bool) else None


def _checkpoint_config(path: Path, seq_len: int | None) -> TransformerConfig:
    """A Hugging Face folder's or a GGUF file's config, ``seq_len`` checked; no weight read."""
    if path.is_file():
        from nohair_jax.checkpoints.gguf_file import hf_config, open_gguf

        return checked_config(hf_config(open_gguf(path), str(path)), str(path), "float32", seq_len)[0]
    return checked_config(read_config(path), str(path / CONFIG_FILE), None, seq_len)[0]


def _expand(source: str | Path) -> list[tuple[str, Path, int | None, bool]]:
    """(name, path, step or None, is a run's checkpoint) of every checkpoint a source names."""
    path = Path(source)
    if _run_folder(path):
        steps = _run_steps(path)
        if not steps:
            raise ValueError(f"training run {str(source)!r} holds no checkpoint")
        return [(str(path / "checkpoints" / str(step)), path / "checkpoints" / str(step), step, True) for step in steps]
    if path.is_dir() and path.name.isdigit() and path.parent.name == "checkpoints" and _run_folder(path.parent.parent):
        return [(str(source), path, int(path.name), True)]
    resolved = resolve_checkpoint(source)  # CheckpointError (a ValueError) naming a missing source
    name = resolved.stem if resolved.is_file() else resolved.name
    return [(str(source), resolved, step_in_name(name), False)]


def _once_each(planned: Sequence[TrainingCheckpoint]) -> None:
    """ValueError naming a checkpoint given twice: one file or folder, once its path is resolved (links,
    ``..``, a run folder and one of its checkpoints), whatever steps it was given."""
    seen = {}
    for c in planned:
        where = c.path.resolve()
        if where in seen:
            first = seen[where]
            named = "" if first.source == c.source else f" (as {first.source!r} and {c.source!r})"
            raise ValueError(f"checkpoint {str(first.path)!r} is given twice{named}: give each checkpoint once")
        seen[where] = c


def _network(config: TransformerConfig) -> dict:
    """The config fields that define the network's shapes and computation, defaults written out (a
    ``d_mlp`` of None is ``4 * d_model``), so that two configs of one network compare equal."""
    fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.name not in _NOT_THE_NETWORK}
    fields.update(n_kv_heads=config.kv_heads, head_width=config.head_dim, d_mlp=config.mlp_width,
                  qkv_bias=config.bias if config.qkv_bias is None else config.qkv_bias)
    if config.position != "learned":
        del fields["max_len"]  # the size of the learned position table; other positions compute any length
    return fields


def _one_network(planned: Sequence[TrainingCheckpoint]) -> None:
    """ValueError naming the first checkpoint (by step) that is not the first one's network (``_network``):
    along training only the weights may differ."""
    first, reference = planned[0], _network(planned[0].config)
    for other in planned[1:]:
        fields = _network(other.config)
        differ = [k for k in dict.fromkeys([*reference, *fields]) if reference.get(k) != fields.get(k)]
        if differ:
            name, more = differ[0], f" (and {', '.join(differ[1:])})" if differ[1:] else ""
            raise ValueError(f"checkpoints {first.source!r} and {other.source!r} are not one network: {name} "
                             f"{reference.get(name)!r} and {fields.get(name)!r}{more}; along training only the "
                             "weights may differ")


def _unreadable_run_checkpoint(path: Path) -> str | None:
    """Why orbax cannot restore a run's ``checkpoints/<step>`` folder, or None: its parameters are listed in
    ``params/_METADATA`` (an empty folder, or one left by a save that never finished, has none)."""
    metadata = path / "params" / "_METADATA"
    if not metadata.is_file():
        return "holds no parameters (no params/_METADATA: empty, or a save that never finished)"
    try:
        saved = load_json(metadata)
    except (ValueError, UnicodeDecodeError):
        saved = None
    tree = saved.get("tree_metadata") if isinstance(saved, dict) else None
    if not (isinstance(tree, dict) and tree):
        return "holds a damaged params/_METADATA (not orbax's list of the parameters)"
    return None


def _readable(checkpoint: TrainingCheckpoint) -> None:
    """ValueError (CheckpointError) naming a folder whose weights cannot be read, from what lists them
    (orbax's metadata, safetensors headers), no weight read: so that no checkpoint fails after others
    were measured. A GGUF file's tensors were listed when its config was read."""
    if checkpoint.run:
        why = _unreadable_run_checkpoint(checkpoint.path)
        if why:
            raise ValueError(f"checkpoint folder {str(checkpoint.path)!r} {why}: remove it or leave it out")
    elif checkpoint.path.is_dir():
        tensor_headers(weight_files(checkpoint.path))


def _vocabulary(checkpoint: TrainingCheckpoint) -> TrainingCheckpoint:
    if checkpoint.run:
        return dataclasses.replace(checkpoint, vocabulary=BYTES)
    tokenizer = tokenizer_or_warning(checkpoint.path)
    vocabulary = None if tokenizer is None else tokenizer.get_vocab(with_added_tokens=True)
    return dataclasses.replace(checkpoint, vocabulary=vocabulary, tokenizer=tokenizer)


def _same_vocabulary(a: TrainingCheckpoint, b: TrainingCheckpoint) -> str | None:
    """Why ``a`` and ``b`` do not share a vocabulary, or None where they do."""
    if a.config.vocab_size != b.config.vocab_size:
        return f"vocabularies of {a.config.vocab_size} and {b.config.vocab_size} tokens"
    if a.vocabulary is None or b.vocabulary is None or a.vocabulary == b.vocabulary:
        return None
    if BYTES in (a.vocabulary, b.vocabulary):
        which = a if a.vocabulary == BYTES else b
        return f"{which.source!r} reads {BYTES}, the other a tokenizer"
    va, vb = a.vocabulary, b.vocabulary
    token = next(t for t in sorted(va.keys() | vb.keys()) if va.get(t) != vb.get(t))
    ids = [f"id {v[token]}" if token in v else "absent" for v in (va, vb)]
    return f"tokenizers of different vocabularies, token {token!r} is {ids[0]} and {ids[1]}"


def plan_training_steps(
    sources: Sequence[str | Path], *, steps: Sequence[int] | None = None, seq_len: int | None = None
) -> list[TrainingCheckpoint]:
    """Every checkpoint the ``sources`` name, in order of training step, checked before any weight is read.

    Args:
      sources: checkpoint sources (the module docstring): Hugging Face folders, GGUF files, packaged
        names, training run folders (every checkpoint they keep), a run's ``checkpoints/<step>``.
      steps: the training step of each source, in the order given (replacing what its name or its
        run says); a run folder, which names several checkpoints, cannot take one.
      seq_len: the longest sequence to be run (P + T): refused where a checkpoint cannot compute it.

    Returns a list of ``TrainingCheckpoint`` sorted by step. ValueError, in one line naming the
    checkpoints, for: fewer than two checkpoints; a missing source; a checkpoint whose step is
    neither in its name nor given; one checkpoint given twice (``_once_each``); two checkpoints at
    one step; checkpoints that are not one network (``_one_network``); different vocabularies (sizes,
    or tokenizers where both have one); a folder whose weights cannot be read (``_readable``).
    """
    sources = list(sources)
    if steps is not None and len(steps) != len(sources):
        raise ValueError(f"{len(steps)} steps given for {len(sources)} checkpoints: give one step per checkpoint")
    planned = []
    for k, source in enumerate(sources):
        expanded = _expand(source)
        if steps is not None and len(expanded) > 1:
            raise ValueError(f"training run {str(source)!r} holds {len(expanded)} checkpoints, each at its own step: "
                             "name them one by one (RUN/checkpoints/<step>) to give their steps")
        for name, path, step, run in expanded:
            step_from = "run" if run else "name"
            if steps is not None:
                step, step_from = int(steps[k]), "given"
                if step < 0:
                    raise ValueError(f"the step of {name!r} must be >= 0, got {step}")
            if step is None:
                raise ValueError(f"checkpoint {name!r} has no training step in its name (as step8000) and is not a "
                                 "training run's checkpoint: give every checkpoint's step (--steps)")
            if run:
                from nohair_jax.train import run_model_config  # the training module (orbax) only for runs

                config, context = run_model_config(path.parent.parent), _run_context(path.parent.parent)
            else:
                config = _checkpoint_config(path, seq_len)
                context = config.max_len
            planned.append(TrainingCheckpoint(name, path, step, step_from, run, config, context))
    if len(planned) < 2:
        raise ValueError(f"{len(planned)} checkpoint given: a measurement along training needs at least two")
    _once_each(planned)
    planned.sort(key=lambda c: c.step)
    for a, b in zip(planned, planned[1:]):
        if a.step == b.step:
            raise ValueError(f"checkpoints {a.source!r} and {b.source!r} are both at step {a.step}")
    if seq_len is not None:
        for c in planned:
            if c.run and c.config.position == "learned" and seq_len > c.config.max_len:
                raise ValueError(f"{seq_len} tokens asked, but {c.source!r} has learned positions up to {c.config.max_len}")
    planned = [_vocabulary(c) for c in planned]
    # Compared with the first checkpoint whose vocabulary is known (a folder without tokenizer.json is
    # compared by size only), so that two known ones always meet.
    reference = next((c for c in planned if c.vocabulary is not None), planned[0])
    for other in planned:
        a, b = sorted((reference, other), key=lambda c: c.step)
        why = None if other is reference else _same_vocabulary(a, b)
        if why:
            raise ValueError(f"checkpoints {a.source!r} and {b.source!r} do not share a vocabulary ({why}): "
                             "the same prompt pairs would mean different text")
    _one_network(planned)
    for c in planned:
        _readable(c)
    return planned


def _past_context(planned: Sequence[TrainingCheckpoint], seq_len: int) -> list[TrainingCheckpoint]:
    """The checkpoints a sequence of ``seq_len`` tokens runs past the training context of."""
    return [c for c in planned if c.context is not None and seq_len > c.context]


def past_training_context(planned: Sequence[TrainingCheckpoint], seq_len: int) -> str | None:
    """A line saying which checkpoints a sequence of ``seq_len`` tokens (P + T) runs past the training
    context of (``TrainingCheckpoint.context``), or None where it runs past none: offsets measured there
    are measured on positions the model never trained on."""
    past = _past_context(planned, seq_len)
    if not past:
        return None
    contexts = "/".join(str(n) for n in sorted({c.context for c in past}))
    return (f"P + T = {seq_len} tokens run past the training context ({contexts} tokens) of the checkpoints at "
            f"steps {', '.join(str(c.step) for c in past)}: positions beyond it were never trained on")


def shared_tokenizer(planned: Sequence[TrainingCheckpoint]):
    """The tokenizer the planned checkpoints share (for ``tokenization.tokenize``): a tokenizer, None for
    a training run's UTF-8 bytes; ValueError where none of them has one."""
    for c in planned:
        if c.tokenizer is not None:
            return c.tokenizer
    if any(c.vocabulary == BYTES for c in planned):
        return None
    raise ValueError("none of the checkpoints has a tokenizer (tokenizer.json or a GGUF file's): text needs one")


@dataclasses.dataclass(frozen=True)
class StepResult:
    """One checkpoint measured: ``checkpoint`` (its source, step, config), ``fits`` (one ``PowerLawFit``
    or ``FitRefused`` per layer 1..L), ``half_life`` (``fit.kl_half_life`` of the next-token KL),
    ``conditions`` (``bound.BoundConditions``) and ``explicit`` (``bound.ExplicitCheck`` per layer, or
    ``NotApplicable`` where the explicit bound is not derived for the model)."""

    checkpoint: TrainingCheckpoint
    fits: tuple[PowerLawFit | FitRefused, ...]
    half_life: HalfLife
    conditions: BoundConditions
    explicit: tuple[ExplicitCheck, ...] | NotApplicable

    @property
    def step(self) -> int:
        return self.checkpoint.step

    def to_dict(self) -> dict:
        c = self.checkpoint
        return {
            "source": c.source, "path": str(c.path.resolve()), "step": c.step, "step_from": c.step_from,
            "model": c.config.to_dict(), "training_context": c.context, "alpha": alphas(self.fits),
            "fits": [f.to_dict() for f in self.fits],
            "kl_half_life": self.half_life.to_dict(), "conditions": self.conditions.to_dict(),
            "explicit": (self.explicit.to_dict() if isinstance(self.explicit, NotApplicable)
                         else [e.to_dict() for e in self.explicit]),
        }


@dataclasses.dataclass(frozen=True)
class TrainingSteps:
    """The result of ``measure_training_steps``: one ``StepResult`` per checkpoint, in order of step,
    and the settings every checkpoint was measured with."""

    results: tuple[StepResult, ...]
    settings: dict

    @property
    def steps(self) -> list[int]:
        return [r.step for r in self.results]

    def alpha(self) -> np.ndarray:
        """float [S, L, 3]: alpha, interval low, interval high per checkpoint and layer (``fit.alpha_table``;
        nan where a fit was refused or has no interval)."""
        return np.stack([alpha_table(r.fits) for r in self.results])

    def to_dict(self) -> dict:
        return {"steps": self.steps, "settings": self.settings, "checkpoints": [r.to_dict() for r in self.results]}

    def save(self, out_dir: str | Path, *, meta: dict | None = None) -> dict:
        """Write ``steps.json`` (``to_dict`` and ``meta``) and ``steps.png`` (``steps_figure``) into
        ``out_dir``, together or not at all (``results.written_together``); returns steps.json's contents."""
        out_dir = Path(out_dir)
        summary = jsonable({**self.to_dict(), "meta": meta or {}})
        with written_together():
            save_json(out_dir / "steps.json", summary)
            save_figure(out_dir / "steps.png", steps_figure(summary))
        return summary


def _pairs(planned, *, n_pairs, prompt_len, length, pair_seed, text) -> tuple[PromptPairs, str]:
    if text is None:
        vocab = planned[0].config.vocab_size
        return random_prompt_pairs(pair_seed, n_pairs, prompt_len, length, vocab), "random tokens"
    tokenizer = shared_tokenizer(planned)
    pairs = text_prompt_pairs(tokenize(tokenizer, text), pair_seed, n_pairs, prompt_len, length,
                              start=sequence_start(tokenizer))
    return pairs, f"cut from text, as {BYTES if tokenizer is None else 'tokens of the shared tokenizer'}"


def measure_training_steps(
    sources: Sequence[str | Path | TrainingCheckpoint],
    *,
    steps: Sequence[int] | None = None,
    n_pairs: int = 8,
    prompt_len: int = 16,
    length: int = 512,
    pair_seed: int = 1,
    text: str | None = None,
    fit_t_min: int = 32,
    n_boot: int = 1000,
    kl_positions=None,
    threshold: float = 0.01,
    progress: bool = False,
    on_step=None,
) -> TrainingSteps:
    """alpha per layer, the KL half-life and the bound's conditions of every checkpoint along training.

    Args:
      sources: checkpoint sources (``plan_training_steps``, with ``steps``), or the checkpoints it
        planned (then taken as they are).
      n_pairs, prompt_len, length, pair_seed: the prompt pairs every checkpoint is measured on: random
        tokens of the shared vocabulary (``pairs.random_prompt_pairs``), or with ``text`` cut from that
        text tokenized with the shared tokenizer (``pairs.text_prompt_pairs``; UTF-8 bytes for runs).
      fit_t_min, n_boot: every layer's fit window start and bootstrap resamples (``fit.fit_power_law``
        above the measured float32 noise floor, as ``nohair offsets``); ``n_boot`` also for the half-life.
      kl_positions: None (every t) or "log" (``offsets.prompt_pair_offsets``).
      threshold: the KL (nats) the half-life's ``t_below`` reads (``fit.kl_half_life``).
      progress: a progress bar over each checkpoint's pairs.
      on_step: called as ``on_step(k, checkpoint, None)`` before checkpoint k (0-based) loads, and as
        ``on_step(k, checkpoint, result)`` once it is measured (a ``StepResult``).

    Returns a ``TrainingSteps``. One checkpoint is in memory at a time. A measurement (P + T) longer
    than some checkpoint's training context is warned (``past_training_context``) and its steps are
    recorded (``settings["past_training_context"]``).
    """
    sources = list(sources)
    if sources and all(isinstance(s, TrainingCheckpoint) for s in sources):
        planned = sorted(sources, key=lambda c: c.step)
    else:
        planned = plan_training_steps(sources, steps=steps, seq_len=prompt_len + length)
    if not 1 <= fit_t_min < length:
        raise ValueError(f"fit_t_min {fit_t_min} leaves no fit window in T = {length} continuation tokens")
    pairs, described = _pairs(planned, n_pairs=n_pairs, prompt_len=prompt_len, length=length, pair_seed=pair_seed,
                              text=text)
    past = past_training_context(planned, prompt_len + length)
    if past:
        warnings.warn(past, stacklevel=2)
    fit_kwargs = dict(t_min=fit_t_min, n_boot=n_boot)
    results = []
    for k, checkpoint in enumerate(planned):
        if on_step:
            on_step(k, checkpoint, None)
        model = checkpoint.load(prompt_len + length)
        m = measure(model, pairs, kl_positions=kl_positions, fit_kwargs=fit_kwargs, progress=progress)
        half = kl_half_life(m.offsets.kl, t=m.offsets.kl_t, threshold=threshold, n_boot=n_boot)
        cond = measure_conditions(model, *pairs)
        _, explicit = explicit_result(cond, m.offsets.l2, length)
        explicit = explicit if isinstance(explicit, NotApplicable) else tuple(explicit)
        del model
        results.append(StepResult(checkpoint, m.fits, half, cond, explicit))
        if on_step:
            on_step(k, checkpoint, results[-1])
    settings = dict(n_pairs=n_pairs, prompt_len=prompt_len, length=length, pair_seed=pair_seed, pairs=described,
                    fit_settings=fit_kwargs, threshold=threshold,
                    kl_positions="every t" if kl_positions is None else str(kl_positions),
                    past_training_context=[c.step for c in _past_context(planned, prompt_len + length)])
    return TrainingSteps(tuple(results), settings)


# ---------------------------------------------------------------------------------------------
# Reading a steps.json: a table and a figure.


def _explicit_holds(saved) -> bool | None:
    """Whether the explicit bound held at every layer and t (None: not derived for the model)."""
    checks = explicit_from_saved(saved)
    return None if isinstance(checks, NotApplicable) else all(e.holds and e.holds_closed for e in checks)


def _sigma_over_floor(cond: dict) -> np.ndarray:
    """[L]: each block's smallest norm input scale floor over sqrt(eps) (the condition: above 1)."""
    depth, per = len(cond["logit_bound"]), len(cond.get("block_norms", ("attention", "MLP")))
    sigma = np.array([np.nan if v is None else v for v in cond["sigma_min"][: per * depth]], np.float64)
    return sigma.reshape(depth, per).min(axis=1) / cond["floor"]


def report(summary: dict) -> str:
    """A ``steps.json`` as a table: per step, alpha at a few layers, the KL half-life, the largest
    attention logit, the smallest norm scale over sqrt(eps), whether the conditions and the explicit bound hold."""
    rows = summary["checkpoints"]
    depth = len(rows[0]["alpha"])
    layers = drawn_layers(depth, most=4)
    fmt = lambda x: "   -  " if x is None else f"{x:6.3f}"  # noqa: E731
    head = "".join(f"  alpha l{layer:<3}" for layer in layers)
    t_min = summary["settings"]["fit_settings"]["t_min"]
    lines = [f"alpha per layer (fit window from t = {t_min}; *: no fit), next-token KL half-life and the bound's "
             "conditions against training step",
             f"{'step':>9}{head}  {'KL half-life':>18}  {'max B_l':>8}  {'sigma/floor':>11}  conditions  explicit bound"]
    for row in rows:
        fits = [fit_from_dict(f) for f in row["fits"]]
        cells = "".join(f"  {fmt(row['alpha'][layer - 1])}{'*' if isinstance(fits[layer - 1], FitRefused) else '':<3}"
                        for layer in layers)
        half = HalfLife.from_dict(row["kl_half_life"])
        hl = f"> {half.length}" if half.t is None else f"{half.t:.0f}"
        if half.ci is not None:
            hl += f" [{half.ci[0]:.0f}, {half.ci[1]:.0f}]"
        cond = row["conditions"]
        logit = max((v for v in cond["logit_bound"] if v is not None), default=float("nan"))
        holds = _explicit_holds(row["explicit"])
        lines.append(f"{row['step']:>9}{cells}  {hl:>18}  {logit:8.3g}  {np.nanmin(_sigma_over_floor(cond)):11.3g}  "
                     f"{'hold' if not cond['failures'] else 'FAIL':>10}  "
                     f"{'not derived' if holds is None else 'holds' if holds else 'VIOLATED'}")
    for row in rows:
        refused = [str(layer) for layer, f in enumerate(row["fits"], start=1) if "error" in f]
        if refused:
            lines.append(f"step {row['step']}: no fit at layer(s) {', '.join(refused)} (steps.json says why)")
        for failure in row["conditions"]["failures"]:
            lines.append(f"step {row['step']}: {failure}")
    past = summary["settings"].get("past_training_context")  # absent from a steps.json of an earlier version
    if past:
        lines.append(f"steps {', '.join(map(str, past))}: measured past the training context (P + T = "
                     f"{summary['settings']['prompt_len'] + summary['settings']['length']} tokens)")
    return "\n".join(lines)


def _step_axis(ax, steps: np.ndarray) -> None:
    """Steps spread over two decades or more on a symlog axis (linear from 0 to the first positive step,
    logarithmic beyond, ticks at 0 and the powers of ten), else linear; a margin on both sides."""
    positive = steps[steps > 0]
    low, high = float(steps.min()), float(steps.max())
    if positive.size and positive.max() / positive.min() >= 100:
        first = float(positive.min())
        ax.set_xscale("symlog", linthresh=first, linscale=0.5)
        ticks = ([0.0] if low <= 0 else []) + [10.0**e for e in range(int(np.ceil(np.log10(first))),
                                                                       int(np.floor(np.log10(high))) + 1)]
        ax.set_xticks(ticks, labels=[_step_label(v) for v in ticks])
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlim(-0.2 * first if low <= 0 else low / 1.3, high * 1.3)
    else:
        margin = 0.04 * (high - low or 1)
        ax.set_xlim(low - margin, high + margin)
    ax.set_xlabel("training step")


def _step_label(step: float) -> str:
    return f"{step:g}" if step < 1000 else f"{step / 1000:g}k" if step < 1e6 else f"{step / 1e6:g}M"


def _layer_key(fig, ax, depth: int) -> None:
    """A legend of the layers (a few) or a colour bar over depth (many, as ``figures.layer_colors``),
    beside a legend of anything else labelled."""
    if depth > MOST_LAYERS_DRAWN:
        from matplotlib import colormaps
        from matplotlib.cm import ScalarMappable
        from matplotlib.colors import Normalize

        fig.colorbar(ScalarMappable(Normalize(1, depth), colormaps["viridis"]), ax=ax, label="layer")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, ncols=2 if depth <= MOST_LAYERS_DRAWN else 1)


def steps_figure(summary: dict) -> Figure:
    """Four panels of a ``steps.json`` against training step: alpha per layer (colour over depth, the last
    layer's interval shaded), the KL half-life with its interval, the largest attention logit per layer
    and each layer's norm-scale floor over sqrt(eps) (the conditions need it above 1)."""
    rows = summary["checkpoints"]
    steps = np.array([r["step"] for r in rows], np.float64)
    depth = len(rows[0]["alpha"])
    colors = layer_colors(depth)
    fig = Figure(figsize=(14, 9.5))
    (ax_alpha, ax_half), (ax_logit, ax_sigma) = fig.subplots(2, 2)

    table = np.stack([alpha_table([fit_from_dict(f) for f in r["fits"]]) for r in rows])  # [S, L, 3]
    for layer in range(1, depth + 1):
        ax_alpha.plot(steps, table[:, layer - 1, 0], "o-", ms=3, lw=1.2, color=colors[layer],
                      label=f"layer {layer}" if depth <= MOST_LAYERS_DRAWN else None)
    ax_alpha.fill_between(steps, table[:, -1, 1], table[:, -1, 2], color=colors[depth], alpha=0.15, lw=0)
    ax_alpha.set(ylabel="alpha (offset ~ t^-alpha)",
                 title=f"alpha per layer; shaded: layer {depth}'s 95 % interval over pairs")
    _layer_key(fig, ax_alpha, depth)

    halves = [HalfLife.from_dict(r["kl_half_life"]) for r in rows]
    length = halves[0].length
    for key, ci_key, color, name in (("t", "ci", "C3", "half of the peak"),
                                     ("t_below", "ci_below", "C0", f"below {halves[0].threshold:g} nats")):
        values = np.array([length if getattr(h, key) is None else getattr(h, key) for h in halves], np.float64)
        never = np.array([getattr(h, key) is None for h in halves])
        ax_half.plot(steps, values, "-", color=color, lw=1.2, label=name)
        ax_half.plot(steps[~never], values[~never], "o", color=color, ms=4)
        if never.any():
            ax_half.plot(steps[never], values[never], "^", color=color, mfc="none", ms=7,
                         label=f"{name}: not by T = {length}")
        intervals = [getattr(h, ci_key) for h in halves]
        if all(ci is not None for ci in intervals):
            lo, hi = np.array(intervals, np.float64).T
            ax_half.fill_between(steps, lo, hi, color=color, alpha=0.12, lw=0)
    ax_half.set_yscale("log")
    plain_log_ticks(ax_half, "y")
    ax_half.set(ylabel="continuation position t", title="next-token KL: half-life and fall below the threshold "
                "(shaded: 95 % intervals)")
    ax_half.legend(fontsize=7)

    conds = [r["conditions"] for r in rows]
    logits = np.array([[np.nan if v is None else v for v in c["logit_bound"]] for c in conds], np.float64)
    sigma = np.stack([_sigma_over_floor(c) for c in conds])
    for layer in range(1, depth + 1):
        ax_logit.plot(steps, logits[:, layer - 1], "o-", ms=3, lw=1.2, color=colors[layer],
                      label=f"layer {layer}" if depth <= MOST_LAYERS_DRAWN else None)
        ax_sigma.plot(steps, sigma[:, layer - 1], "o-", ms=3, lw=1.2, color=colors[layer],
                      label=f"layer {layer}" if depth <= MOST_LAYERS_DRAWN else None)
    ax_logit.set(ylabel="B_l, largest |q.k| / sqrt(d_head)", title="the largest attention logit per layer (bounded: "
                 "a condition)")
    _layer_key(fig, ax_logit, depth)
    ax_sigma.axhline(1.0, color="C3", lw=1, ls="--", label="sqrt(eps): a norm's input below it fails the conditions")
    ax_sigma.set_yscale("log")
    ax_sigma.set(ylabel="sigma_min / sqrt(eps)", title="each layer's smallest norm input scale over the floor")
    _layer_key(fig, ax_sigma, depth)
    failing = [r["step"] for r in rows if r["conditions"]["failures"]]
    for ax in (ax_logit, ax_sigma):
        for step in failing:
            ax.axvline(step, color="C3", lw=0.8, alpha=0.5)
    for ax in (ax_alpha, ax_half, ax_logit, ax_sigma):
        _step_axis(ax, steps)

    holds = [_explicit_holds(r["explicit"]) for r in rows]
    bound = ("explicit bound not derived for this model" if all(h is None for h in holds)
             else f"explicit bound holds at {sum(h is True for h in holds)} of {len(rows)} checkpoints")
    s = summary["settings"]
    cfg = rows[0]["model"]
    fig.suptitle(f"{len(rows)} checkpoints, {depth} layers, d_model {cfg['d_model']}; {s['n_pairs']} pairs "
                 f"({s['pairs']}), P = {s['prompt_len']}, T = {s['length']}; conditions hold at "
                 f"{len(rows) - len(failing)} of {len(rows)} (failing steps marked red); {bound}")
    fig.tight_layout()
    return fig


def draw_steps(out_dir: str | Path) -> Path:
    """Draw ``steps.png`` again from ``steps.json`` in ``out_dir``."""
    out_dir = Path(out_dir)
    return save_figure(out_dir / "steps.png", steps_figure(load_json(out_dir / "steps.json")))
