"""Prompt-pair offsets: how far two prompts keep a shared continuation apart (docs/definitions.md#offsets).

Two prompts ``a``, ``b`` and one continuation ``c`` of length ``T``; the model runs on ``a+c`` and
``b+c`` and the offset at continuation position ``t = 1..T`` (index ``P + t - 1``) is

    l2[l, t]       = || h_l(a+c)[P+t-1] - h_l(b+c)[P+t-1] ||_2
    relative[l, t] = l2[l, t] / mean(||h_l(a+c)[P+t-1]||, ||h_l(b+c)[P+t-1]||)
    kl[t]          = KL( p(. | a+c[:P+t]) || p(. | b+c[:P+t]) )   (nats, next-token distributions)

``pair_offsets`` is the pure, traceable computation (vmap or jit it as you like). Two front doors
run it, both checking the inputs on the host and running at full matmul precision:
``prompt_pair_offsets`` (one model; compiles once per shape and walks over pairs in equal chunks
with a progress bar, float64 and sparse KL positions on request) and ``sweep_offsets`` (several
models of one config as stacked parameters, their (model, pair) items sharded over a device mesh,
one program for all). ``measurement.measure`` picks between them.

No padding anywhere, and by default one pair per compiled call: every pair runs through the same
program at its own length, so a pair measured alone or among any others gives bit-identical
numbers (XLA may round differently when it fuses a batch or a loop of pairs). It is also the
faster choice at long T on a CPU, where the attention weights of many pairs at once are
gigabytes (benchmarks/offsets.py measures it). ``pairs_per_call > 1`` batches several pairs per
call instead: faster for short continuations or on a GPU, equal to single runs to rounding only.
"""

from __future__ import annotations

import dataclasses
import functools
import weakref
from contextlib import ExitStack
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx, struct
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from tqdm.auto import tqdm

from nohair_jax.checks import check_int, integer_array
from nohair_jax.fit import noise_floor_curve
from nohair_jax.model import Probe, Transformer, for_measurement, merge_stacked_blocks, split_stacked_blocks, token_ids

def continuation_positions(length: int) -> np.ndarray:
    """Continuation positions t = 1..T as int [T] (the x axis of every offset curve)."""
    return np.arange(1, length + 1)


def log_positions(length: int, *, dense: int = 32, per_decade: int = 32) -> np.ndarray:
    """int [K]: every t in 1..min(dense, T), then about ``per_decade`` log-spaced t per decade up to
    and including T; where the fits and half-lives read a curve, at a fraction of the positions."""
    head = np.arange(1, min(dense, length) + 1)
    if length <= dense:
        return head
    count = max(2, int(np.ceil(per_decade * np.log10(length / dense))) + 1)
    tail = np.unique(np.round(np.geomspace(dense, length, count)).astype(np.int64))
    return np.unique(np.concatenate([head, tail]))


@dataclasses.dataclass(frozen=True)
class Offsets:
    """Offsets of ``n_pairs`` prompt pairs at continuation positions ``t = 1..T``.

    l2:       [n_pairs, L+1, T] Euclidean distance of the residual streams (units of h).
    relative: [n_pairs, L+1, T] l2 divided by the mean of the two hidden-state norms.
    kl:       [n_pairs, T] KL divergence of the next-token distributions, a-run from b-run (nats);
              rounding can leave values of order -1e-7 where the two are nearly equal.
    norm:     [n_pairs, L+1, T] mean of the two hidden-state norms (the scale of the float noise).
    prompt_len: P, the prompt length the continuation follows.
    kl_positions: int [K], the t at which kl was measured (then kl is [n_pairs, K]); None: every t.
    """

    l2: np.ndarray
    relative: np.ndarray
    kl: np.ndarray
    norm: np.ndarray
    prompt_len: int
    kl_positions: np.ndarray | None = None

    @property
    def t(self) -> np.ndarray:
        """Continuation positions 1..T."""
        return continuation_positions(self.l2.shape[-1])

    @property
    def kl_t(self) -> np.ndarray:
        """The continuation positions of ``kl``'s last axis."""
        return self.t if self.kl_positions is None else self.kl_positions


# The KL's logits are made a [KL_ROWS, KL_VOCAB_CHUNK] tile per run at a time (8 MB for both runs),
# where the logits at every t of SmolLM2's 49152-word vocabulary were 200 MB per run, written once
# and read several times (docs/benchmarks.md has the times).
KL_ROWS = 256
KL_VOCAB_CHUNK = 4096


def streamed_next_token_kl(unembed, vocab_size: int, y_a: jax.Array, y_b: jax.Array) -> jax.Array:
    """KL(softmax(z_a) || softmax(z_b)) with z = ``unembed(y, start, size)``, the logits of the
    vocabulary entries start .. start + size - 1: y_a, y_b [..., D] -> [...] (nats).

    The full logits [..., vocab_size] are never held: rows go ``KL_ROWS`` at a time on a CPU (all
    at once elsewhere), and each row walks over the vocabulary ``KL_VOCAB_CHUNK`` entries at a
    time with running maxima m, sums s = sum exp(z - m) and the cross term
    c = sum exp(z_a - m_a) (z_a - z_b), rescaled when a maximum grows (the online softmax of
    blockwise attention). Then

        KL = c / s_a - (m_a - m_b + log(s_a / s_b)),

    two exponentials per logit; as accurate as the same sums over whole rows (float32 rounding of
    order 1e-7 times the logits' magnitude). Both runs go through the same operations, so
    identical inputs give exactly 0.
    """
    chex.assert_equal_shape([y_a, y_b])
    lead, width = y_a.shape[:-1], y_a.shape[-1]
    count = int(np.prod(lead))
    # A CPU keeps a tile in cache; an accelerator is filled by all rows at once (as the attention's row pairs).
    rows = max(1, min(KL_ROWS, count) if jax.default_backend() == "cpu" else count)
    ys = jnp.stack([y_a.reshape(count, width), y_b.reshape(count, width)])
    ys = jnp.pad(ys, ((0, 0), (0, -count % rows), (0, 0)))  # zero rows: a finite KL, trimmed below
    tiles = ys.reshape(2, -1, rows, width).swapaxes(0, 1)  # [n_tiles, 2, rows, D]
    chunk = min(KL_VOCAB_CHUNK, vocab_size)
    n_full, tail = divmod(vocab_size, chunk)

    def fold(state, y, start, size):
        """Fold vocabulary entries start .. start + size - 1 into (m [2, rows], s [2, rows], c [rows])."""
        top, total, cross = state
        z = unembed(y.reshape(2 * rows, width), start, size).reshape(2, rows, size)
        new_top = jnp.maximum(top, z.max(-1))
        e = jnp.exp(z - new_top[..., None])
        keep = jnp.exp(top - new_top)  # 0 on the first chunk (top = -inf)
        return new_top, keep * total + e.sum(-1), keep[0] * cross + jnp.sum(e[0] * (z[0] - z[1]), axis=-1)

    def tile_kl(y):
        state = (jnp.full((2, rows), -jnp.inf, y.dtype), jnp.zeros((2, rows), y.dtype), jnp.zeros(rows, y.dtype))
        state, _ = jax.lax.scan(lambda st, i: (fold(st, y, i * chunk, chunk), None), state, jnp.arange(n_full))
        if tail:
            state = fold(state, y, n_full * chunk, tail)
        top, total, cross = state
        return cross / total[0] - (top[0] - top[1] + jnp.log(total[0] / total[1]))

    return jax.lax.map(tile_kl, tiles).reshape(-1)[:count].reshape(lead)


def next_token_kl(logits_a: jax.Array, logits_b: jax.Array) -> jax.Array:
    """KL(softmax(logits_a) || softmax(logits_b)) over the last axis: [..., V], [..., V] -> [...]
    (nats); ``streamed_next_token_kl`` with the logits given."""
    chex.assert_equal_shape([logits_a, logits_b])
    take = lambda z, start, size: jax.lax.dynamic_slice_in_dim(z, start, size, axis=-1)  # noqa: E731
    return streamed_next_token_kl(take, logits_a.shape[-1], logits_a, logits_b)


def _distances(h_a: jax.Array, h_b: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The continuation's streams of both runs [..., T, D] -> l2, mean norm [..., T]."""
    return jnp.linalg.norm(h_a - h_b, axis=-1), 0.5 * (jnp.linalg.norm(h_a, axis=-1) + jnp.linalg.norm(h_b, axis=-1))


class _RunDistances(Probe):
    """Both runs in one batch (rows [:n] run a, [n:] run b): each layer's distances on the last
    ``length`` positions, read as the layer is computed; the output not projected."""

    n: int = struct.field(pytree_node=False)
    length: int = struct.field(pytree_node=False)
    project: bool = struct.field(pytree_node=False, default=False)

    def read(self, x):
        return _distances(x[: self.n, -self.length:], x[self.n:, -self.length:])


def pair_offsets(model: Transformer, prompts_a: jax.Array, prompts_b: jax.Array, continuations: jax.Array,
                 kl_at: tuple[int, ...] | None = None):
    """Traceable core of ``model`` on ``prompts_a``, ``prompts_b``, ``continuations``: int [n, Pa],
    [n, Pb], [n, T] -> (l2, relative, norm [n, L+1, T], kl [n, T]).

    Pa and Pb may differ only for models without absolute positions (checked by the caller).
    ``kl_at`` (static), the continuation positions t (1-based) at which to compute the logits and
    the KL: kl is then [n, K]; None: every t.
    """
    chex.assert_rank([prompts_a, prompts_b, continuations], 2)
    chex.assert_type([prompts_a, prompts_b, continuations], int)
    chex.assert_equal_shape_prefix([prompts_a, prompts_b, continuations], 1)
    tokens_a = jnp.concatenate([prompts_a, continuations], axis=1)
    tokens_b = jnp.concatenate([prompts_b, continuations], axis=1)
    length, n = continuations.shape[1], continuations.shape[0]
    t = np.arange(1, length + 1) if kl_at is None else np.asarray(kl_at)
    at = lambda prompt: jnp.asarray(prompt.shape[1] + t - 1)  # noqa: E731  sequence indices of t

    if tokens_a.shape == tokens_b.shape:
        # Both runs in one batch (about 15 % faster on a CPU than two calls); rows of one batch run
        # through identical code, so identical prompts still give exactly zero. Each layer's
        # distances are taken as the layer is computed: no [L+1, 2n, P+T, D] stack is held.
        out = model(jnp.concatenate([tokens_a, tokens_b]), probe=_RunDistances(logits_at=at(prompts_a), n=n, length=length))
        (l2, norm), (y_a, y_b) = out.hidden, (out.final[:n], out.final[n:])  # [L+1, n, T]
    else:
        out_a = model(tokens_a, probe=Probe(logits_at=at(prompts_a), project=False))
        out_b = model(tokens_b, probe=Probe(logits_at=at(prompts_b), project=False))
        l2, norm = _distances(out_a.hidden[:, :, -length:], out_b.hidden[:, :, -length:])
        y_a, y_b = out_a.final, out_b.final
    relative = jnp.where(l2 > 0, l2 / jnp.where(norm > 0, norm, 1), 0.0)
    kl = streamed_next_token_kl(model.unembed, model.config.vocab_size, y_a, y_b)
    to_pairs = lambda x: jnp.moveaxis(x, 0, 1)  # [L+1, n, T] -> [n, L+1, T]
    return to_pairs(l2), to_pairs(relative), to_pairs(norm), kl


def _as_tokens(name: str, x, vocab_size: int) -> np.ndarray:
    """Host-side check of a token array: integer dtype (``checks.integer_array``), ids in [0, vocab_size)."""
    arr = np.asarray(integer_array(name, x))
    if arr.size and (arr.min() < 0 or arr.max() >= vocab_size):
        bad = arr.min() if arr.min() < 0 else arr.max()
        where = tuple(int(i) for i in np.argwhere(arr == bad)[0])
        raise ValueError(f"{name} holds token id {bad} at index {where}, outside the vocabulary [0, {vocab_size})")
    return arr.astype(np.int32)


def check_pairs(cfg, prompts_a, prompts_b, continuations) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validate a prompt-pair batch against a model config; returns int32 arrays [n, Pa], [n, Pb], [n, T].

    A 1-D ``continuations`` [T] is shared by every pair.
    """
    a = _as_tokens("prompts_a", prompts_a, cfg.vocab_size)
    b = _as_tokens("prompts_b", prompts_b, cfg.vocab_size)
    c = _as_tokens("continuations", continuations, cfg.vocab_size)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] == 0 or b.shape[1] == 0:
        raise ValueError(f"prompts must have shape [n_pairs, P] with P >= 1, got prompts_a {a.shape} and prompts_b {b.shape}")
    if a.shape[0] != b.shape[0]:
        raise ValueError(f"prompts_a has {a.shape[0]} pairs but prompts_b has {b.shape[0]}")
    if a.shape[0] == 0:
        raise ValueError(f"no prompt pairs: prompts of shape {a.shape} (prompts_a, prompts_b); give at least one pair")
    if a.shape[1] != b.shape[1] and cfg.position in ("learned", "sinusoidal"):
        raise ValueError(
            f"prompts_a and prompts_b of unequal length (P_a={a.shape[1]}, P_b={b.shape[1]}) would shift the continuation's "
            f"absolute positions (position={cfg.position!r}); use equal lengths or a relative/no position encoding"
        )
    if c.ndim == 1:
        c = np.broadcast_to(c, (a.shape[0], c.shape[0]))
    if c.ndim != 2 or c.shape[0] != a.shape[0] or c.shape[1] == 0:
        raise ValueError(f"continuations must have shape [T] or [n_pairs={a.shape[0]}, T] with T >= 1, got {c.shape}")
    total = max(a.shape[1], b.shape[1]) + c.shape[1]
    if cfg.position == "learned" and total > cfg.max_len:
        raise ValueError(
            f"P + T = {total} exceeds the learned position table (max_len={cfg.max_len}) for prompts_a or prompts_b "
            "followed by continuations; shorten the continuation or use a model with a longer table"
        )
    return a, b, np.ascontiguousarray(c)


def check_tokens(cfg, tokens, name: str = "tokens") -> np.ndarray:
    """Validate a batch of sequences against a model config: int32 [B, T] with B, T >= 1, ids in the
    vocabulary, T within a learned position table; ValueError/TypeError naming ``name`` otherwise."""
    x = _as_tokens(name, token_ids(tokens, name), cfg.vocab_size)
    if cfg.position == "learned" and x.shape[1] > cfg.max_len:
        raise ValueError(f"{name} of length {x.shape[1]} exceeds the learned position table (max_len={cfg.max_len})")
    return x


def prompt_pair_offsets(
    model: Transformer,
    prompts_a,
    prompts_b,
    continuations,
    *,
    pairs_per_call: int = 1,
    float64: bool = False,
    kl_positions=None,
    progress: bool = False,
) -> Offsets:
    """Offsets of each prompt pair at every layer and continuation position.

    Args:
      model: a ``Transformer`` (parameters are read, never changed).
      prompts_a, prompts_b: int [n_pairs, P] token ids.
      continuations: int [n_pairs, T], or [T] shared by every pair.
      pairs_per_call: pairs batched into one compiled call (1: bit-identical to single runs).
        Every call has the same shape (the last is filled up with repeats of the final pair and
        trimmed), so there is one compilation per shape.
      float64: run parameters and activations in float64 (for measurements near the float32
        noise floor); results are float64.
      kl_positions: where to compute the logits and the next-token KL: None, every t; ``"log"``,
        ``log_positions(T)`` (every t up to 32, then 32 per decade: the vocabulary projection of a
        large-vocabulary model at a fraction of the cost); or int t values in 1..T, increasing.
      progress: show a progress bar over calls.

    Returns:
      ``Offsets`` with numpy arrays l2, relative, norm [n_pairs, L+1, T] and kl [n_pairs, T]
      (``[n_pairs, K]`` at ``Offsets.kl_t`` with ``kl_positions``).
    """
    a, b, c = check_pairs(model.config, prompts_a, prompts_b, continuations)
    positions = _kl_positions(kl_positions, c.shape[1])
    static = {} if positions is None else {"kl_at": tuple(int(t) for t in positions)}
    l2, relative, norm, kl = map_pairs(
        pair_offsets, model, a, b, c, pairs_per_call=pairs_per_call, float64=float64, progress=progress, **static
    )
    check_finite_result("l2 offset", l2)
    check_finite_result("next-token KL", kl, positions)
    return Offsets(l2=l2, relative=relative, kl=kl, norm=norm, prompt_len=a.shape[1], kl_positions=positions)


def check_finite_result(name: str, x: np.ndarray, t_of: np.ndarray | None = None) -> None:
    """One line naming the first non-finite entry of a per-pair result ``x`` [n_pairs, (L+1,) K]
    (``t_of``: the t of each of the K columns; None: t = 1..K), raised before anything is saved or
    fitted: the activations overflowed."""
    bad = ~np.isfinite(x)
    if bad.any():
        pair, *layer, k = (int(i) for i in np.argwhere(bad)[0])
        where = f"layer {layer[0]}, " if layer else ""
        t = k + 1 if t_of is None else int(t_of[k])
        raise ValueError(f"non-finite {name} at pair {pair}, {where}t = {t}: the activations overflowed")


def _kl_positions(kl_positions, length: int) -> np.ndarray | None:
    if kl_positions is None:
        return None
    if isinstance(kl_positions, str):
        if kl_positions != "log":
            raise ValueError(f"kl_positions must be None, 'log' or int positions t in 1..T, got {kl_positions!r}")
        return log_positions(length)
    try:
        t = np.asarray(kl_positions)
    except ValueError:  # ragged
        t = np.asarray(None)
    if t.ndim != 1 or t.size == 0 or t.dtype.kind not in "iu" or t[0] < 1 or t[-1] > length or np.any(np.diff(t) <= 0):
        shown = " ".join(repr(kl_positions).split())  # one line, however numpy prints an array
        raise ValueError(f"kl_positions must be increasing int positions t in 1..T = 1..{length} (continuations' T), got "
                         f"{shown if len(shown) <= 80 else shown[:77] + '...'}")
    return t.astype(np.int64)


_all_finite = jax.jit(lambda x: jnp.isfinite(x).all())  # one program a shape, not two eager ones


def check_finite_parameters(model: Transformer) -> None:
    """ValueError naming the first parameter that holds a NaN or an infinity (every offset would be NaN).

    A pass over the weights, about 0.2 s for a 135M-parameter model on a CPU (the engine does it
    once per model: ``prepared_parameters``); one host sync, the names looked up only on failure."""
    flat = nnx.to_flat_state(nnx.state(model))
    finite = [_all_finite(var.get_value()) for _, var in flat]
    if np.asarray(jnp.stack(finite)).all():  # one transfer to the host, not one a parameter
        return
    for (path, var), ok in zip(flat, finite):
        if not bool(ok):
            name = ".".join(str(k) for k in path)
            raise ValueError(f"parameter {name} holds {int((~jnp.isfinite(var.get_value())).sum())} non-finite values")


def map_pairs(
    pair_fn, models: Transformer | list[Transformer], a: np.ndarray, b: np.ndarray, c: np.ndarray, *,
    mesh: Mesh | None = None, batch_size: int = 1, pairs_per_call: int = 1, float64: bool = False,
    progress: bool = False, **static,
) -> list[np.ndarray]:
    """The per-pair engine every measurement runs through: a traceable ``pair_fn(model, a, b, c,
    **static) -> arrays [k, ...]`` over checked pairs (``check_pairs``), at full matmul precision
    (on GPUs the default may be TF32 or bf16, a noise floor on every offset); ``static`` are
    hashable settings compiled in. Returns the outputs over (model, pair) items, model-major, as
    numpy arrays [S * N, ...].

    Two backends. One model and no ``mesh``: its parameters checked finite and stacked once
    (``prepared_parameters``), ``pairs_per_call`` pairs per compiled call (one compilation per
    shape: the last call is filled up with repeats and trimmed), optional ``float64``, a progress
    bar over calls. Several models of one config, or a ``mesh``: one
    program for all (``_stacked_call``): the models' parameters stacked, the items sharded over
    the mesh's devices (default ``sweep_mesh()``: every device of every process), each device
    walking over its items ``batch_size`` at a time.
    """
    models = [models] if isinstance(models, Transformer) else list(models)
    with jax.default_matmul_precision("highest"):
        if len(models) == 1 and mesh is None:
            return _per_pair_calls(pair_fn, models[0], a, b, c, pairs_per_call, float64, progress, static)
        if float64:
            raise ValueError("float64 runs one model on its own, not stacked models or a mesh")
        return _stacked(pair_fn, models, a, b, c, sweep_mesh() if mesh is None else mesh, batch_size, static)


@functools.partial(jax.jit, static_argnames=("pair_fn", "graphdef", "static"))
def _pairs_call(pair_fn, graphdef, state, blocks, prompts_a, prompts_b, continuations, static=()):
    model = for_measurement(merge_stacked_blocks(graphdef, state, blocks))
    return pair_fn(model, prompts_a, prompts_b, continuations, **dict(static))


class _Prepared(NamedTuple):
    arrays: list[weakref.ref]  # the parameter arrays the entry was made from
    state: nnx.State
    blocks: nnx.State


_LAST_PREPARED: list[_Prepared] = []  # at most one entry: the last model measured


def prepared_parameters(model: Transformer) -> tuple[nnx.GraphDef, nnx.State, nnx.State]:
    """The model as the per-pair engine passes it to its compiled calls: ``split_stacked_blocks``
    of it, after ``check_finite_parameters``. Each is a pass over the weights (about 0.3 and 0.15 s
    for SmolLM2 on a CPU, per call of ``prompt_pair_offsets``), so the last model's result is kept
    while its parameter arrays are the same objects (jax arrays are immutable: same objects, same
    values; a training step or ``nnx.update`` puts new ones in). The kept copy of the blocks'
    parameters costs their size in memory while that model lives."""
    # Fresh each call (attributes such as the attention implementation live in the graphdef), from
    # one walk of the graph: a second walk for the arrays was half of this function's 22 ms on SmolLM2.
    graphdef, state = nnx.split(model)
    arrays = [var.get_value() for _, var in nnx.to_flat_state(state)]
    if _LAST_PREPARED:
        last = _LAST_PREPARED[0]
        if len(last.arrays) == len(arrays) and all(ref() is x for ref, x in zip(last.arrays, arrays)):
            return graphdef, last.state, last.blocks
    _LAST_PREPARED.clear()
    check_finite_parameters(model)
    _, state, blocks = split_stacked_blocks(model)
    # Committed to their device, every model alike: a trained model's arrays (a jitted step's outputs) are,
    # a fresh model's are not, and jit compiled each program once for each kind (2 s a program, small model).
    state, blocks = jax.tree.map(lambda x: jax.device_put(x, x.sharding), (state, blocks))
    entry = _Prepared([weakref.ref(x) for x in arrays], state, blocks)
    _LAST_PREPARED.append(entry)
    # The model's arrays gone: drop the copy (by id: a reference would keep the copy alive; an id
    # reused by a later entry only costs that entry a recomputation).
    weakref.finalize(arrays[0], _forget, id(entry))
    return graphdef, state, blocks


def _forget(entry_id: int) -> None:
    if _LAST_PREPARED and id(_LAST_PREPARED[0]) == entry_id:
        _LAST_PREPARED.clear()


def _per_pair_calls(pair_fn, model, a, b, c, pairs_per_call, float64, progress, static) -> list[np.ndarray]:
    n = a.shape[0]
    k = min(check_int("pairs_per_call", pairs_per_call), n)
    graphdef, state, blocks = prepared_parameters(model)
    results = []
    with ExitStack() as stack:
        if float64:
            stack.enter_context(jax.enable_x64(True))
            state, blocks = jax.tree_util.tree_map(lambda x: x.astype(jnp.float64), (state, blocks))
        for start in tqdm(range(0, n, k), desc=pair_fn.__name__, unit="call", disable=not progress, leave=False):
            idx = np.minimum(np.arange(start, start + k), n - 1)
            out = _pairs_call(pair_fn, graphdef, state, blocks, a[idx], b[idx], c[idx], static=tuple(sorted(static.items())))
            results.append([np.asarray(x) for x in out])
    return [np.concatenate(parts)[:n] for parts in zip(*results)]


def sweep_mesh(devices=None) -> Mesh:
    """A one-axis mesh ``("items",)`` over ``devices`` (default: every device of every process)."""
    return Mesh(np.asarray(jax.devices() if devices is None else devices), ("items",))


@functools.partial(jax.jit, static_argnames=("pair_fn", "graphdef", "mesh", "batch_size", "static"))
def _stacked_call(states, items, prompts_a, prompts_b, continuations, *, pair_fn, graphdef, mesh, batch_size, static):
    """states: parameters stacked [S, ...]; items int [M] (model * N + pair, M a multiple of the
    device count times batch_size); pairs [N, P], [N, P], [N, T] -> pair_fn's outputs [M, ...]."""
    n_pairs = prompts_a.shape[0]

    def on_device(local_items, states, *pairs):
        def one_item(item):
            # Gather this item's parameters and pair; lax.map vmaps it, so a batch may mix models.
            state = jax.tree.map(lambda x: x[item // n_pairs], states)
            model = for_measurement(nnx.merge(graphdef, state))
            return [x[0] for x in pair_fn(model, *(x[item % n_pairs][None] for x in pairs), **dict(static))]

        return jax.lax.map(one_item, local_items, batch_size=batch_size)

    # Items are split over devices; parameters and pairs are small and replicated, so any item
    # can run anywhere and no device talks to another. With no collectives inside, the
    # varying-axis type check only gets in the way: it rejects loops whose carry starts as a
    # replicated constant (the model's blockwise attention at long T), so it is off.
    replicated = P()
    return jax.shard_map(
        on_device, mesh=mesh, in_specs=(P("items"), replicated, replicated, replicated, replicated), out_specs=P("items"),
        check_vma=False,
    )(items, states, prompts_a, prompts_b, continuations)


def _stacked(pair_fn, models, a, b, c, mesh, batch_size, static) -> list[np.ndarray]:
    graphdefs = {nnx.graphdef(m) for m in models}
    if len(graphdefs) != 1:
        raise ValueError(f"stacked models must share one config, got {len(graphdefs)} different ones")
    check_int("batch_size", batch_size)
    n_items = len(models) * a.shape[0]
    # Pad with repeats of the last item so every device gets the same number of whole batches.
    items = np.minimum(np.arange(_round_up(n_items, mesh.size * batch_size)), n_items - 1).astype(np.int32)
    states = jax.tree.map(lambda *xs: jnp.stack(xs), *(nnx.state(m) for m in models))
    put = lambda x, spec: jax.device_put(x, NamedSharding(mesh, spec))  # noqa: E731
    out = _stacked_call(put(states, P()), put(items, P("items")), put(a, P()), put(b, P()), put(c, P()),
                        pair_fn=pair_fn, graphdef=graphdefs.pop(), mesh=mesh, batch_size=batch_size,
                        static=tuple(sorted(static.items())))
    # On several hosts each holds only its devices' items; gather them everywhere.
    return [np.asarray(multihost_utils.process_allgather(x, tiled=True))[:n_items] for x in out]


def sweep_offsets(models: list[Transformer], prompts_a, prompts_b, continuations, *, mesh: Mesh | None = None,
                  batch_size: int = 1) -> list[Offsets]:
    """Offsets of the same pairs under several models of one config, in one compiled program
    (``map_pairs``' stacked backend).

    Args:
      models: S ``Transformer``s sharing one config (seeds of a sweep, checkpoints of a run).
      prompts_a, prompts_b: int [N, P]; continuations: int [N, T] or [T] (as ``prompt_pair_offsets``).
      mesh: a one-axis mesh (``sweep_mesh``) whose devices share the S * N items; default all devices.
      batch_size: items vmapped together on a device. 1 (the default, the fastest on CPUs at long
        T) gives l2, relative and norm equal to ``prompt_pair_offsets`` on each model alone to
        float32 rounding: bit for bit in some configurations (one head of 16 features, the
        packaged SmolLM2), not in others (the tests' 4-head tiny model: 2e-6 relative), as XLA
        compiles the larger program's operations differently; kl to float32 rounding too.

    Returns:
      One ``Offsets`` per model: l2, relative, norm [N, L+1, T], kl [N, T], numpy arrays. The
      program is cached by (config, mesh, batch_size, shapes), so S seeds compile it once.
    """
    a, b, c = check_pairs(models[0].config, prompts_a, prompts_b, continuations)
    out = map_pairs(pair_offsets, list(models), a, b, c, mesh=sweep_mesh() if mesh is None else mesh, batch_size=batch_size)
    per_model = lambda x: x.reshape(len(models), a.shape[0], *x.shape[1:])  # noqa: E731
    return [
        Offsets(l2=x_l2, relative=x_rel, kl=x_kl, norm=x_norm, prompt_len=a.shape[1])
        for x_l2, x_rel, x_norm, x_kl in zip(*map(per_model, out))
    ]


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def measure_noise_floor(
    model: Transformer, prompts_a, prompts_b, continuations, *, n_pairs: int = 2, measured: Offsets | None = None
) -> np.ndarray:
    """Float noise of the l2 offsets, measured, not guessed: [L+1, T] in the units of h.

    ``prompts_a``, ``prompts_b``, ``continuations``: int [n, Pa], [n, Pb], [n, T], as
    ``prompt_pair_offsets``.

    Runs the first ``n_pairs`` pairs in float64 and compares them with the same pairs in the model's
    dtype (taken from ``measured``, the offsets of these pairs already computed, when given), then
    turns the difference into a per-layer envelope over log-spaced bins of t
    (``fit.noise_floor_curve``). Give a layer's row to ``fit_power_law(..., floor=...)`` so the fit
    window ends above it.
    """
    a, b, c = check_pairs(model.config, prompts_a, prompts_b, continuations)
    keep = slice(0, max(1, min(n_pairs, a.shape[0])))
    low = (measured.l2 if measured is not None else prompt_pair_offsets(model, a[keep], b[keep], c[keep]).l2)[keep]
    # The floor reads l2 only: the float64 run projects onto the vocabulary at one position, not at every t.
    ref = prompt_pair_offsets(model, a[keep], b[keep], c[keep], float64=True, kl_positions=[c.shape[1]]).l2
    return np.stack([noise_floor_curve(low[:, layer], ref[:, layer]) for layer in range(low.shape[1])])
