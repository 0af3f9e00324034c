"""Random bad arrays thrown at the library's public functions that take arrays (issue 42, item 6).

Every function below starts from a small valid call; hypothesis then replaces one or two of its
array arguments by a variant of the valid value: another rank (an axis added or dropped, a Python
scalar, a 0-d array), an empty or resized axis (so that two arguments no longer match), another
dtype (bool, complex, objects, numbers or text held as objects, text, floats for token ids, ints for
floats), a NaN, an infinity, a
negative, zero or huge value, a negative or out-of-vocabulary token id, a Python list, a ragged
list, None, a string or a dict. The property (docs/definitions.md#conventions for the shapes):

* the call succeeds with a result of the documented shape, finite where the function promises
  finite numbers (NaN only where its docstring says so), or
* it raises ValueError or TypeError from the project's own code, in one line that names an argument
  it was given wrong (never an IndexError, ZeroDivisionError, AttributeError, KeyError or
  AssertionError, and never a message numpy or JAX wrote);
* the valid call itself succeeds, with the documented result (so a function that refuses everything
  fails);
* inputs no function may take silently (booleans, complex numbers, objects, text, ragged lists;
  non-finite or non-positive positions t; out-of-vocabulary token ids) always raise.

The models are tiny (vocab 16, width 8, 2 layers) and shared by all examples, so that compiling
does not dominate. Derandomized: CI runs the same examples. ``pytest -s`` prints how many examples
each function ran.
"""

from __future__ import annotations

import dataclasses
import re
import sys
import traceback
import warnings
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
from flax import nnx
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import nohair_jax as nh
from nohair_jax import data as nh_data
from nohair_jax import dynamics, fit, relay
from nohair_jax.bound import explicit_check, shape_check
from nohair_jax.offsets import measure_noise_floor, sweep_offsets
from nohair_jax.sinks import key_attention, sink_attention

PACKAGE = Path(nh.__file__).parent
VOCAB = 16
T = 48  # positions of the fitted curves
RAN: Counter = Counter()  # examples run per function
SUCCEEDED: Counter = Counter()  # of which the call succeeded (and its result was checked)

# --- how an argument goes wrong -------------------------------------------------------------

SHAPES = ["add_axis", "drop_axis", "scalar", "zero_d", "empty_axis", "resize_axis"]
DTYPES = ["bool", "complex", "object", "object_numbers", "object_text", "text", "float", "int"]
VALUES = ["nan", "inf", "neg_inf", "negative", "zero", "huge"]
IDS = ["negative_id", "out_of_vocab", "huge_id"]
CONTAINERS = ["list", "ragged", "none", "string", "dict"]
BENIGN = ("valid", "list", "object_numbers", "int", "resize_axis")  # often still valid: drawn a quarter of the time
ALWAYS_REFUSED = {"bool", "complex", "object", "object_text", "text", "ragged", "none", "string", "dict"}


@dataclasses.dataclass(frozen=True)
class Kind:
    """What an argument holds: which mutations apply, and which of them must always be refused."""

    mutations: tuple[str, ...]
    refused: frozenset = frozenset()
    vocab: int | None = None  # token ids: the vocabulary they must lie in


def _kind(drop=(), refused=(), vocab=None, ids=False) -> Kind:
    pool = [m for m in SHAPES + DTYPES + VALUES + (IDS if ids else []) + CONTAINERS if m not in drop]
    return Kind(tuple(["valid"] + pool), frozenset(ALWAYS_REFUSED | set(refused)), vocab)


POSITIVE = ("nan", "inf", "neg_inf", "negative", "zero")
KINDS = {
    "t": _kind(refused=POSITIVE),  # positions [T], finite, positive, increasing
    "tpos": _kind(refused=POSITIVE),  # positions of any shape (the relay model's closed forms)
    "curve": _kind(),  # offsets: positive where a log is taken (elsewhere ignored, documented)
    "reals": _kind(),  # any real numbers
    "coeff": _kind(drop=("huge",), refused=("nan", "inf", "neg_inf")),  # relay coefficients: finite
    "points": _kind(drop=("huge",)),  # token dynamics (traced: NaN in, NaN out, documented)
    "labels": _kind(drop=("huge",), refused=("float", "nan", "inf", "neg_inf")),  # group labels: ints
    "ids": _kind(refused=("float", "nan", "inf", "neg_inf", "negative_id", "out_of_vocab", "huge_id", "empty_axis"),
                 vocab=VOCAB, ids=True),  # token ids of the tiny models
    "ids_shared": _kind(refused=("float", "nan", "inf", "neg_inf", "negative_id", "out_of_vocab", "huge_id",
                                 "empty_axis"), vocab=VOCAB, ids=True),  # continuations: [T] is allowed too
    "stream": _kind(refused=("float", "nan", "inf", "neg_inf", "negative_id"), ids=True),  # a token stream [n], no vocabulary
    "bytes": _kind(refused=("float", "nan", "inf", "neg_inf", "negative_id", "out_of_vocab", "huge_id"),
                   vocab=256, ids=True),
    "kl_t": _kind(refused=("float", "nan", "inf", "neg_inf", "negative", "zero", "huge")),  # kl_positions
    "raw_ids": Kind(("valid", *SHAPES, *DTYPES, *CONTAINERS), frozenset(ALWAYS_REFUSED)),  # Transformer: ids not range-checked (documented)
}


def _mutate(draw, mutation: str, value, kind: Kind):
    """``value`` (a valid argument, a numpy array) changed by ``mutation``."""
    x = np.asarray(value)
    axis = lambda: draw(st.integers(0, max(x.ndim - 1, 0)))  # noqa: E731
    spot = lambda: draw(st.integers(0, max(x.size - 1, 0)))  # noqa: E731
    if mutation == "valid":
        return value
    if mutation == "add_axis":
        return np.expand_dims(x, draw(st.integers(0, x.ndim)))
    if mutation == "drop_axis":
        return x.take(0, axis=axis()) if x.ndim and x.size else x.reshape(-1)[:0]
    if mutation == "scalar":
        return x.reshape(-1)[0].item() if x.size else 1.0
    if mutation == "zero_d":
        return x.reshape(-1)[0] if x.size else np.asarray(1.0)
    if mutation in ("empty_axis", "resize_axis"):
        if x.ndim == 0:
            return x.reshape(1)[:0]
        k = axis()
        n = x.shape[k]
        size = 0 if mutation == "empty_axis" else draw(st.sampled_from(sorted({1, max(n - 1, 1), n + 1})))
        taken = np.take(x, np.minimum(np.arange(size), n - 1), axis=k)
        if size > n and x.dtype.kind == "f" and k == x.ndim - 1 and np.all(np.diff(x, axis=-1) > 0):
            taken[..., n:] = x[..., -1:] + np.arange(1, size - n + 1)  # positions t stay increasing
        return taken
    if mutation == "bool":
        return x.astype(bool)
    if mutation == "complex":
        return x.astype(complex) + 1j * draw(st.sampled_from([0.0, 1.0]))
    if mutation == "object":
        out = np.empty(x.shape, dtype=object)
        out.fill(object())
        return out
    if mutation == "object_numbers":
        return x.astype(object)
    if mutation == "object_text":  # numbers written as text, held as objects: numpy would convert them
        return x.astype(str).astype(object)
    if mutation == "text":
        return x.astype(str)
    if mutation == "float":
        return x.astype(np.float64) + draw(st.sampled_from([0.0, 0.5]))
    if mutation == "int":
        with np.errstate(invalid="ignore"):  # a documented NaN (explicit_check's closed) cast to int
            return x.astype(np.int64)
    if mutation in VALUES:
        new = {"nan": np.nan, "inf": np.inf, "neg_inf": -np.inf, "zero": 0.0, "huge": 1e300}.get(mutation)
        out = x.astype(np.float64).copy() if mutation != "zero" or x.dtype.kind not in "iu" else x.copy()
        if out.size:
            k = spot()
            out.reshape(-1)[k] = -abs(out.reshape(-1)[k]) - 1 if mutation == "negative" else new
        return out
    if mutation in IDS:
        vocab = kind.vocab or VOCAB
        out = x.astype(np.int64).copy()
        if out.size:
            out.reshape(-1)[spot()] = {"negative_id": -1, "out_of_vocab": vocab, "huge_id": 2**40}[mutation]
        return out
    if mutation == "list":
        return x.tolist()
    if mutation == "ragged":
        rows = x.tolist() if x.ndim >= 2 and x.shape[0] >= 2 and x.shape[1] >= 1 else [[1, 2], [3]]
        rows[-1] = rows[-1][:-1]
        return rows
    return {"none": None, "string": "abc", "dict": {"a": 1}}[mutation]


# --- the functions and what a success must look like ------------------------------------------


@dataclasses.dataclass(frozen=True)
class Spec:
    """One public function: its valid arguments, the kinds of those that are fuzzed, how it is
    called, and what a successful result must satisfy (``check(result, args)``, asserts)."""

    name: str
    call: Callable[..., Any]
    valid: Callable[[], dict]
    kinds: dict[str, str]
    check: Callable[[Any, dict], None]
    examples: int = 50
    names: dict = dataclasses.field(default_factory=dict)  # argument -> how the library calls it
    optional: tuple = ()  # arguments for which None is a valid value


def _check(ok, shown) -> None:
    """A successful call's result must satisfy ``ok``; ``shown`` is what the failure prints."""
    assert ok, f"wrong result: {shown}"


def _finite(*values) -> bool:
    return all(np.isfinite(np.asarray(v, dtype=np.float64)).all() for v in values)


def _curves(n=4):
    t = np.arange(1, T + 1, dtype=np.float64)
    scale = 1 + 0.05 * np.arange(n)[:, None] + 0.01 * np.sin(np.arange(T))
    return t, scale * t**-0.5


def _fit_ok(result, t=None):
    if isinstance(result, fit.FitRefused):
        assert "\n" not in result.reason
        return True
    assert isinstance(result, fit.PowerLawFit), type(result)
    assert _finite(result.alpha, result.prefactor, result.r2), result
    assert result.ci is None or _finite(result.ci), result
    if t is not None:
        lo, hi = np.min(np.asarray(t, np.float64)), np.max(np.asarray(t, np.float64))
        assert lo <= result.t_range[0] < result.t_range[1] <= hi, result
    return True


def _ints_in(x, low, high):
    x = np.asarray(x)
    assert x.dtype.kind in "iu" and (x.size == 0 or (x.min() >= low and x.max() < high)), x
    return True


def _reduced_shape(d):
    d = np.asarray(d, dtype=np.float64)
    return d.shape if d.ndim == 1 else d.shape[:-2] + d.shape[-1:]


def _propagates(result, *inputs):
    """NaN out only where a NaN or infinity went in (pure reductions)."""
    if _finite(*inputs):
        assert _finite(result), result
    return True


def _t():
    return np.arange(1, T + 1, dtype=np.float64)


FIT_SPECS = [
    Spec("fit_power_law", lambda t, d, floor, groups: fit.fit_power_law(t, d, t_min=4, n_boot=20, floor=floor, groups=groups),
         lambda: dict(zip(("t", "d"), _curves())) | dict(floor=np.full(T, 1e-9), groups=np.array([0, 0, 1, 1])),
         dict(t="t", d="curve", floor="curve", groups="labels"), lambda r, a: _fit_ok(r, a["t"]), optional=("floor", "groups")),
    Spec("fit_or_refuse", lambda t, d: fit.fit_or_refuse(t, d, t_min=4, n_boot=20),
         lambda: dict(zip(("t", "d"), _curves())), dict(t="t", d="curve"), lambda r, a: _fit_ok(r, a["t"])),
    Spec("local_exponent", lambda t, d: fit.local_exponent(t, d),
         lambda: dict(zip(("t", "d"), _curves())), dict(t="t", d="curve"),
         lambda r, a: _check(r[0].shape == r[1].shape and r[0].ndim == 1 and r[0].size >= 1 and _finite(*r), r)),
    Spec("local_exponent_rise", lambda t, d, groups: fit.local_exponent_rise(t, d, groups=groups),
         lambda: dict(zip(("t", "d"), _curves())) | dict(groups=np.array([0, 0, 1, 1])),
         dict(t="t", d="curve", groups="labels"),
         lambda r, a: _check(_finite(r.rise, r.first, r.last) and (r.ci is None or _finite(r.ci)), r), optional=("groups",)),
    Spec("summary_curve", lambda d: fit.summary_curve(d), lambda: dict(d=_curves()[1]), dict(d="reals"),
         lambda r, a: _check(r.shape == _reduced_shape(a["d"]) and _propagates(r, a["d"]), r.shape)),
    Spec("quarter_rise", lambda exponents: fit.quarter_rise(exponents), lambda: dict(exponents=_curves()[1]),
         dict(exponents="reals"),
         lambda r, a: _check(np.shape(r) == np.shape(a["exponents"])[:-1] and _propagates(r, a["exponents"]), np.shape(r))),
    Spec("noise_floor_curve", lambda d_low, d_ref: fit.noise_floor_curve(d_low, d_ref),
         lambda: dict(d_low=_curves()[1], d_ref=_curves()[1] * (1 + 1e-7)), dict(d_low="reals", d_ref="reals"),
         lambda r, a: _check(r.shape == (np.shape(a["d_low"])[-1],) and _finite(r) and (r >= 0).all(), r)),
    Spec("kl_half_life", lambda kl, t: fit.kl_half_life(kl, t=t, n_boot=20),
         lambda: dict(kl=_curves()[1] * 0.1, t=_t()), dict(kl="reals", t="t"),
         lambda r, a: _check(_finite(r.kl_peak, r.peak_t, r.last_bin_t)
                             and all(v is None or _finite(v) for v in (r.t, r.t_below, r.ci, r.ci_below)), r), optional=("t",)),
    Spec("power_law_tolerance",
         lambda t, d, groups, shape: fit.power_law_tolerance(t, d, t_min=2, n_boot=20, groups=groups, shapes={"relay": shape}),
         lambda: dict(zip(("t", "d"), _curves())) | dict(groups=np.array([0, 0, 1, 1]), shape=_t() ** -0.6),
         dict(t="t", d="curve", groups="labels", shape="curve"),
         lambda r, a: _check(_finite(r.deviation, r.holdout, r.alpha, r.decades)
                             and all(ci is None or _finite(ci) for ci in (r.ci, r.holdout_ci)), r),
         names=dict(shape="shapes"), optional=("groups",)),
    Spec("alpha_difference",
         lambda t, d_a, d_b, floor_a, groups_a: fit.alpha_difference(t, d_a, d_b, t_min=4, n_boot=20, floor_a=floor_a,
                                                                    groups_a=groups_a),
         lambda: dict(t=_t(), d_a=_curves()[1], d_b=_curves()[1] ** 1.4, floor_a=np.full(T, 1e-9),
                      groups_a=np.array([0, 0, 1, 1])),
         dict(t="t", d_a="curve", d_b="curve", floor_a="curve", groups_a="labels"),
         lambda r, a: _check(_finite(r.difference, r.alpha_a, r.alpha_b) and (r.ci is None or _finite(r.ci)), r),
         optional=("floor_a", "groups_a")),
    Spec("paired_alpha_difference",
         lambda t, d_a, d_b, groups: fit.paired_alpha_difference(t, d_a, d_b, t_min=4, n_boot=20, groups=groups),
         lambda: dict(t=_t(), d_a=_curves()[1], d_b=_curves()[1] ** 1.4, groups=np.array([0, 0, 1, 1])),
         dict(t="t", d_a="curve", d_b="curve", groups="labels"),
         lambda r, a: _check(_finite(r.difference, r.alpha_a, r.alpha_b) and (r.ci is None or _finite(r.ci)), r),
         optional=("groups",)),
    Spec("difference_or_refuse", lambda t, d_a, d_b: fit.difference_or_refuse(t, d_a, d_b, t_min=4, n_boot=20),
         lambda: dict(t=_t(), d_a=_curves()[1], d_b=_curves()[1] ** 1.4), dict(t="t", d_a="curve", d_b="curve"),
         lambda r, a: _check(isinstance(r, fit.FitRefused) or _finite(r.difference), r), examples=25),
    Spec("fit_layers", lambda t, l2, floor: fit.fit_layers(t, l2, floor, t_min=4, n_boot=20),
         lambda: dict(t=_t(), l2=np.stack([_curves()[1], _curves()[1] ** 1.2, _curves()[1] ** 0.8], axis=1),
                      floor=np.full((3, T), 1e-9)),
         dict(t="t", l2="curve", floor="curve"),
         lambda r, a: _check(len(r) == np.shape(a["l2"])[1] - 1 and all(_fit_ok(f, a["t"]) for f in r), r), optional=("floor",)),
    Spec("alpha_vs_window", lambda t, d, t_mins, t_maxs: fit.alpha_vs_window(t, d, t_mins, t_maxs),
         lambda: dict(zip(("t", "d"), _curves())) | dict(t_mins=np.array([2.0, 4.0]), t_maxs=np.array([24.0, 48.0])),
         dict(t="t", d="curve", t_mins="reals", t_maxs="reals"),
         # nan where a window is unusable (documented); finite alphas elsewhere
         lambda r, a: _check(r.shape == (len(a["t_mins"]), len(a["t_maxs"])) and not np.isinf(r).any(), r)),
    Spec("bootstrap_indices", lambda groups: fit.bootstrap_indices(4, 5, 0, groups), lambda: dict(groups=np.array([0, 0, 1, 1])),
         dict(groups="labels"), lambda r, a: _check(r.shape == (5, 4) and _ints_in(r, 0, 4), r), optional=("groups",)),
]

RELAY_SPECS = [
    Spec("relay.offsets",
         lambda residual, direct, relay_read, prompt_offset: relay.offsets(
             2, 12, 3, residual=residual, direct=direct, relay=relay_read, prompt_offset=prompt_offset),
         lambda: dict(residual=np.array([0.0, 1.0, 0.5]), direct=np.ones(3), relay_read=np.array([1.0, 0.5, 1.0]),
                      prompt_offset=np.ones(3)),
         dict(residual="coeff", direct="coeff", relay_read="coeff", prompt_offset="coeff"),
         lambda r, a: _check(np.shape(r) == (4, 12) and _finite(r), r), names=dict(relay_read="relay")),
    *[Spec(f"relay.{name}", lambda t, f=f: f(2, t, 3), lambda: dict(t=np.array([1.0, 3.0, 10.0, 100.0])), dict(t="tpos"),
           lambda r, a: _check(np.shape(r) == np.shape(a["t"]) and _finite(r), r), examples=30)
      for name, f in (("closed_form", relay.closed_form), ("asymptotic", relay.asymptotic),
                      ("local_exponent", relay.local_exponent))],
]


def _pairs_ok(r, a):
    stream = np.asarray(a["tokens"])
    assert [x.shape for x in r] == [(2, 3), (2, 3), (2, 4)] and all(x.dtype == np.int32 for x in r), r
    assert set(np.unique(np.concatenate([x.ravel() for x in r]))) <= set(stream.tolist()), r


DATA_SPECS = [
    Spec("text_prompt_pairs", lambda tokens: nh.text_prompt_pairs(tokens, 0, 2, 3, 4), lambda: dict(tokens=np.arange(40)),
         dict(tokens="stream"), _pairs_ok),
    Spec("data.decode", lambda tokens: nh_data.decode(tokens), lambda: dict(tokens=nh_data.encode("hello, world")),
         dict(tokens="bytes"), lambda r, a: _check(isinstance(r, str) and np.ndim(a["tokens"]) == 1, (r, np.shape(a["tokens"])))),
]


def _points():
    return np.random.default_rng(0).normal(size=(4, 3))


def _batch_shape(r, x):
    assert np.shape(r) == np.shape(x)[:-2] and np.asarray(r).dtype.kind in "iuf", (np.shape(r), np.shape(x))


DYNAMICS_SPECS = [
    Spec("dynamics.diameter", lambda x: dynamics.diameter(x), lambda: dict(x=_points()), dict(x="points"),
         lambda r, a: _batch_shape(r, a["x"])),
    Spec("dynamics.mean_cosine", lambda x: dynamics.mean_cosine(x), lambda: dict(x=_points()), dict(x="points"),
         lambda r, a: _batch_shape(r, a["x"])),
    Spec("dynamics.n_clusters", lambda x: dynamics.n_clusters(x, 0.5), lambda: dict(x=_points()), dict(x="points"),
         lambda r, a: _batch_shape(r, a["x"])),
    Spec("dynamics.distance_to", lambda x, targets: dynamics.distance_to(x, targets),
         lambda: dict(x=_points(), targets=_points()[::-1]), dict(x="points", targets="points"),
         lambda r, a: _batch_shape(r, a["x"])),
    Spec("dynamics.drift_bound", lambda V: dynamics.drift_bound(V), lambda: dict(V=np.eye(3)), dict(V="points"),
         lambda r, a: _check(np.shape(r) == (), np.shape(r))),
    Spec("dynamics.attention_drift", lambda x, Q, K, V: dynamics.attention_drift(x, Q, K, V),
         lambda: dict(x=_points(), Q=np.eye(3), K=np.eye(3), V=np.eye(3)), dict(x="points", Q="points", K="points", V="points"),
         lambda r, a: _check(np.shape(r) == np.shape(a["x"]), np.shape(r))),
]

# --- the tiny models, built once (compiled programs are cached per model and shape) -------------


class _Models:
    """Built on first use: a learned-position model (the default) and a RoPE one, for the functions
    with their own check of equal prompt lengths (with learned positions ``check_pairs`` refuses first)."""

    def __getattr__(self, name):
        cfg = dict(vocab_size=VOCAB, d_model=8, n_heads=2, n_layers=2, max_len=16)
        built = {"learned": lambda: nh.Transformer(nh.TransformerConfig(**cfg), rngs=nnx.Rngs(0)),
                 "learned2": lambda: nh.Transformer(nh.TransformerConfig(**cfg), rngs=nnx.Rngs(1)),
                 "rope": lambda: nh.Transformer(nh.TransformerConfig(**cfg, position="rope"), rngs=nnx.Rngs(0))}
        if name not in built:
            raise AttributeError(name)
        setattr(self, name, built[name]())
        return getattr(self, name)


MODELS = _Models()
LAYERS = 2


def _pair_args():
    rng = np.random.default_rng(0)
    return dict(prompts_a=rng.integers(0, VOCAB, (2, 3)), prompts_b=rng.integers(0, VOCAB, (2, 3)),
                continuations=rng.integers(0, VOCAB, (2, 5)))


PAIR_KINDS = dict(prompts_a="ids", prompts_b="ids", continuations="ids_shared")


def _n_t(a):
    """Pairs and continuation length of a successful call's arguments."""
    return np.shape(a["prompts_a"])[0], np.shape(a["continuations"])[-1]


def _per_pair(x, a, layers=True):
    n, length = _n_t(a)
    assert x.shape == ((n, LAYERS + 1, length) if layers else (n, length)) and _finite(x), (x.shape, (n, length))
    return True


def _offsets_ok(r, a):
    for x in (r.l2, r.relative, r.norm):
        _per_pair(x, a)
    k = _n_t(a)[1] if a.get("kl_positions") is None else len(a["kl_positions"])
    assert r.kl.shape == (_n_t(a)[0], k) and _finite(r.kl), r.kl.shape
    return True


def _forward_ok(r, a):
    b, length = np.shape(a["tokens"])
    assert r.logits.shape == (b, length, VOCAB) and r.hidden.shape == (LAYERS + 1, b, length, 8), r.logits.shape


MODEL_SPECS = [
    Spec("prompt_pair_offsets",
         lambda prompts_a, prompts_b, continuations, kl_positions: nh.prompt_pair_offsets(
             MODELS.learned, prompts_a, prompts_b, continuations, kl_positions=kl_positions),
         lambda: _pair_args() | dict(kl_positions=np.array([1, 3, 5])), PAIR_KINDS | dict(kl_positions="kl_t"),
         _offsets_ok, examples=24, optional=("kl_positions",)),
    Spec("measure_noise_floor", lambda prompts_a, prompts_b, continuations: measure_noise_floor(
        MODELS.learned, prompts_a, prompts_b, continuations, n_pairs=1), _pair_args, PAIR_KINDS,
         lambda r, a: _check(r.shape == (LAYERS + 1, _n_t(a)[1]) and _finite(r) and (r >= 0).all(), r.shape),
         examples=12),
    Spec("sweep_offsets", lambda prompts_a, prompts_b, continuations: sweep_offsets(
        [MODELS.learned, MODELS.learned2], prompts_a, prompts_b, continuations), _pair_args, PAIR_KINDS,
         lambda r, a: _check(len(r) == 2 and all(_offsets_ok(o, a) for o in r), r), examples=12),
    Spec("direct_relay_split", lambda prompts_a, prompts_b, continuations: nh.direct_relay_split(
        MODELS.rope, prompts_a, prompts_b, continuations), _pair_args, PAIR_KINDS,
         lambda r, a: _check(all(_per_pair(x, a) for x in (r.total, r.direct, r.relay)), r), examples=12),
    Spec("linear_response", lambda prompts_a, prompts_b, continuations: nh.linear_response(
        MODELS.rope, prompts_a, prompts_b, continuations, n_random=1), _pair_args, PAIR_KINDS,
         lambda r, a: _check(all(_per_pair(x, a) for x in (r.along_pair, r.frobenius)), r), examples=12),
    Spec("measure_conditions", lambda prompts_a, prompts_b, continuations: nh.measure_conditions(
        MODELS.rope, prompts_a, prompts_b, continuations), _pair_args, PAIR_KINDS,
         lambda r, a: _check(r.logit_bound.shape == (LAYERS,) and r.prompt_offsets.shape == (LAYERS + 1,)
                             and _finite(r.logit_bound, r.sigma_min, r.prompt_offsets), r), examples=12),
    Spec("sink_attention", lambda tokens: sink_attention(MODELS.learned, tokens), lambda: dict(tokens=_pair_args()["continuations"]),
         dict(tokens="ids"),
         lambda r, a: _check(r.shape == (LAYERS, 2) and _finite(r) and (r >= 0).all() and (r <= 1 + 1e-6).all(), r), examples=12),
    Spec("key_attention", lambda tokens: key_attention(MODELS.learned, tokens), lambda: dict(tokens=_pair_args()["continuations"]),
         dict(tokens="ids"),
         lambda r, a: _check(r.shape == (LAYERS, *np.shape(a["tokens"])[:1], 2, *np.shape(a["tokens"])[1:]) and _finite(r), r.shape),
         examples=12),
    Spec("Transformer.__call__", lambda tokens: MODELS.learned(tokens), lambda: dict(tokens=_pair_args()["continuations"]),
         dict(tokens="raw_ids"), _forward_ok, examples=15),
]


def _l2():
    return np.stack([_curves(3)[1] * 0.0 + 1e-3, _curves(3)[1], _curves(3)[1] ** 1.3], axis=1)  # [3, L+1 = 3, T]


BOUND_SPECS = [
    Spec("bound.shape_check", lambda t, l2: shape_check(t, l2, 2, n_boot=20), lambda: dict(t=_t(), l2=_l2()),
         dict(t="t", l2="curve"),
         lambda r, a: _check(len(r) == np.shape(a["l2"])[1] - 1 and all(
             isinstance(c, fit.FitRefused) or _finite(c.slope, c.slope_log_shape, c.relay_prefactor) for c in r), r)),
    Spec("bound.explicit_check", lambda l2, recursion, closed: explicit_check(l2, recursion, closed),
         lambda: dict(l2=_l2(), recursion=np.ones((3, T)), closed=np.where(np.arange(T) < 3, np.nan, 2.0) * np.ones((3, 1))),
         dict(l2="curve", recursion="reals", closed="reals"),
         lambda r, a: _check(len(r) == np.shape(a["l2"])[1] - 1 and all(
             not np.isnan(c.margin) and not np.isnan(c.margin_closed) for c in r), r)),
]

SPECS = FIT_SPECS + RELAY_SPECS + DATA_SPECS + DYNAMICS_SPECS + BOUND_SPECS + MODEL_SPECS


def _names(err: BaseException, spec: Spec, mutated: list[str]) -> bool:
    words = [spec.names.get(name, name) for name in mutated]
    return any(re.search(rf"(?<![\w]){re.escape(word)}(?![\w])", str(err)) for word in words)


def _raised_in_project(err: BaseException) -> bool:
    """The innermost Python frame of the traceback lies in the nohair_jax package."""
    frames = traceback.extract_tb(err.__traceback__)
    return bool(frames) and Path(frames[-1].filename).resolve().is_relative_to(PACKAGE.resolve())


def _one_example(spec: Spec, data) -> None:
    args = spec.valid()
    mutated = data.draw(st.lists(st.sampled_from(sorted(spec.kinds)), min_size=1, max_size=2, unique=True), label="arguments")
    applied = {}
    for name in mutated:
        kind = KINDS[spec.kinds[name]]
        pool = [m for m in BENIGN if m in kind.mutations] if data.draw(st.integers(0, 3), label="benign") == 0 else kind.mutations
        mutation = data.draw(st.sampled_from(pool), label=f"{name} mutation")
        args[name] = _mutate(data.draw, mutation, args[name], kind)
        applied[name] = mutation
    RAN[spec.name] += 1
    event(" ".join(f"{k}={v}" for k, v in applied.items()))
    must_refuse = [name for name, m in applied.items()
                   if m in KINDS[spec.kinds[name]].refused and not (m == "none" and name in spec.optional)]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # numpy's RuntimeWarnings: the result is judged instead
            result = spec.call(**args)
    except (ValueError, TypeError) as err:
        if set(applied.values()) == {"valid"}:
            raise  # a valid call must succeed: a function that refuses everything would pass otherwise
        message = str(err)
        assert "\n" not in message.strip(), f"{applied}: a message of several lines: {message!r}"
        assert _raised_in_project(err), f"{applied}: raised outside nohair_jax: {type(err).__name__}: {message}"
        assert _names(err, spec, list(applied)), f"{applied}: the message names no argument it was given wrong: {message!r}"
        return
    assert not must_refuse, f"{applied}: accepted silently (must be refused: {must_refuse}) -> {type(result).__name__}"
    spec.check(result, args)
    SUCCEEDED[spec.name] += 1


@pytest.mark.parametrize(
    "spec", [pytest.param(s, id=s.name) for s in SPECS])
def test_bad_arrays_fail_by_name_or_give_the_documented_result(spec):
    @settings(max_examples=spec.examples, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
    @given(data=st.data())
    def run(data):
        _one_example(spec, data)

    spec.check(spec.call(**spec.valid()), spec.valid())  # the valid call itself succeeds, with the documented result
    RAN[spec.name] = SUCCEEDED[spec.name] = 0
    try:
        run()
    finally:
        print(f"\n{spec.name}: {RAN[spec.name]} examples, {SUCCEEDED[spec.name]} succeeded", file=sys.stderr)
