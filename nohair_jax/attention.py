"""Causal attention over [B, T, heads, head_dim] arrays, two ways, equal to float rounding.

``plain_attention`` materialises the [B, H, T, T] logits and weights: what a probe's ``read_attention`` reads
(the largest |logit|, the attention the prompt receives), and simple to compile and
differentiate, but its memory grows as T^2 ([T, T] float32 at T = 65536 is 17 GB per head).

``blockwise_attention`` holds a few [rows, block] tiles of logits at a time instead: queries and
keys are cut into blocks of ``block`` positions and each query block walks over the key blocks at
or below the diagonal with an online softmax (a running maximum and sum, rescaling the partial
output when the maximum grows; Milakov & Gimelshein 2018, Rabe & Staats 2021, Dao et al. 2022).
Memory is O(T * block) and the masked upper triangle is skipped, so long sequences cost about
half the FLOPs of the plain path; tiles that stay in cache make it faster from T ~ 512 on.

The tiles are walked in a static, balanced order: query blocks are paired (``r`` with ``n-1-r``),
and the two blocks of a row pair have ``n - 1`` tiles below the diagonal together, so every row
pair is its two (masked) diagonal tiles and one ``lax.scan`` of ``n - 1`` unmasked steps. Static
trip counts keep the function differentiable (no while-loop). Row pairs are independent: on a
CPU one loop walks them one tile at a time (a tile stays in cache; XLA's CPU runtime, jax 0.10,
runs even independent loops one after the other, so splitting the pairs among per-core loops
gained nothing: docs/benchmarks.md); on an accelerator one loop computes all of them at once.
Within a loop step the runtime does run independent operations side by side, so on a CPU each
step's (sequence, key/value head) tiles are separate operations (``lanes``).

Grouped-query attention (``k``, ``v`` with fewer heads than ``q``) never repeats keys or values:
the query heads that share a key/value head are folded into the rows of one matrix product.

What shapes the logits ``q.k / sqrt(hd)`` beyond the causal mask is one ``LogitTerms`` (built from
a config by ``logit_terms``), applied the same way on both paths: Gemma 2's soft cap first
(``soft_cap``), then what positions add (``added_logits``): the dilution-cancelling prompt bias
(docs/definitions.md#logit-bias), ALiBi's ``-m_h (i - j)`` and a sliding window's mask.
Positions ``i`` (query) and ``j`` (key) are 0-based here.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from nohair_jax.checks import check_int

if TYPE_CHECKING:
    from nohair_jax.config import PromptLogitBias, TransformerConfig

IMPLEMENTATIONS = ("auto", "plain", "blockwise")
# "auto" switches to blockwise from this length on (unless a probe reads the weights). On a CPU blockwise already
# runs offsets 1.9x faster at T = 512 and 3x at 1024 (docs/benchmarks.md); shorter sequences, the
# training contexts among them, keep the plain path: it compiles faster and its gradient is a
# plain one.
BLOCKWISE_FROM = 1024
DEFAULT_BLOCK = 512
# Separate operations per tile step on a CPU: one per (sequence, key/value head) up to this many.
CPU_LANES = 8


def use_blockwise(implementation: str, length: int, reads_weights: bool) -> bool:
    """Which path a call takes. A probe that reads the weights (``Probe.read_attention``) needs the plain path."""
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(f"attention implementation {implementation!r} is not one of {IMPLEMENTATIONS}")
    if implementation == "blockwise" and reads_weights:
        raise ValueError("this probe reads the full attention weights: use implementation 'plain' or 'auto'")
    if implementation == "auto":
        return not reads_weights and length >= BLOCKWISE_FROM
    return implementation == "blockwise"


def position_dtype(dtype):
    """Positions, angles and position-dependent logits in at least float32: bfloat16 cannot even
    tell position 256 from 257."""
    return jnp.promote_types(dtype, jnp.float32)


def alibi_slopes(n_heads: int) -> np.ndarray:
    """ALiBi's slope ``m_h`` of each head, float64 [n_heads] (Press et al. 2022): for a power of two
    ``n``, the geometric sequence ``2^(-8 h / n)``, h = 1..n; otherwise the ``n'`` slopes of the largest
    power of two ``n' < n`` and then every other slope of ``2 n'``, as many as are missing."""
    closest = 2 ** int(math.floor(math.log2(n_heads)))
    slopes = 2.0 ** (-8.0 * np.arange(1, closest + 1) / closest)
    if closest == n_heads:
        return slopes
    return np.concatenate([slopes, alibi_slopes(2 * closest)[0::2][: n_heads - closest]])


class LogitTerms(NamedTuple):
    """What shapes every head's logits beyond the causal mask; nothing when all are None.

    prompt_bias: the dilution-cancelling bias (``prompt_bias``).
    alibi: ALiBi's slope per query head [H] (``alibi_slopes``): ``-m_h (i - j)`` on key j of query i.
    window: a query at i reads only the keys ``i - window < j <= i`` (Mistral's sliding window); an int,
            or a traced one where it differs per layer (``TransformerConfig.window_layers``).
    softcap: logits become ``c tanh(logit / c)`` before anything is added (Gemma 2's soft-capping).
    scale: the logit is ``scale * q.k`` (Gemma's ``query_pre_attn_scalar^-1/2``); None: ``q.k / sqrt(hd)``.
    """

    prompt_bias: PromptLogitBias | None = None
    alibi: tuple[float, ...] | None = None
    window: int | jax.Array | None = None
    softcap: float | None = None
    scale: float | None = None


def logit_terms(cfg: TransformerConfig, window: int | jax.Array | None = None) -> LogitTerms:
    """The ``LogitTerms`` of one layer of a model: the config's window on every layer, or where it is on some
    layers only (``window_layers``) the layer's ``window`` (``Transformer.layer_windows``), which must be given."""
    if cfg.window_layers is not None and window is None:
        raise ValueError("the window is on some layers only (window_layers): give this layer's window")
    alibi = tuple(alibi_slopes(cfg.n_heads).tolist()) if cfg.position == "alibi" else None
    return LogitTerms(cfg.prompt_logit_bias, alibi, cfg.sliding_window if window is None else window, cfg.attn_softcap,
                      cfg.attn_scale)


def scaled(x: jax.Array, hd: int, terms: LogitTerms | None) -> jax.Array:
    """``x`` (q.k, or q) times the logit scale: ``terms.scale``, else divided by sqrt(hd)."""
    if terms is None or terms.scale is None:
        return x / jnp.sqrt(jnp.asarray(hd, x.dtype))
    return x * jnp.asarray(terms.scale, x.dtype)


def soft_cap(logits: jax.Array, cap: float | None) -> jax.Array:
    """``cap * tanh(logits / cap)`` (|result| < cap), or the logits where cap is None."""
    return logits if cap is None else cap * jnp.tanh(logits / cap)


def added_logits(terms: LogitTerms | None, q_pos: jax.Array, k_pos: jax.Array, slopes: jax.Array | None, dtype):
    """The additive logits of ``terms`` for rows at 0-based positions q_pos int [R] and keys k_pos int [K]:
    [..., R, K] (-inf outside the window), or None when there are none. ``slopes`` [..., R] are the
    ALiBi slopes of each row's head (None without ALiBi)."""
    if terms is None or (terms.prompt_bias is None and terms.alibi is None and terms.window is None):
        return None
    work = position_dtype(dtype)
    distance = q_pos[:, None] - k_pos[None, :]  # i - j
    total = jnp.zeros(distance.shape, work)
    if terms.prompt_bias is not None:
        total = total + prompt_bias(q_pos, k_pos, terms.prompt_bias, work)
    if slopes is not None:
        total = total - slopes[..., None].astype(work) * distance.astype(work)
    if terms.window is not None:
        total = jnp.where(distance < terms.window, total, -jnp.inf)
    return total.astype(dtype)


def prompt_bias(query_pos: jax.Array, key_pos: jax.Array, bias: PromptLogitBias, dtype) -> jax.Array:
    """[Tq, Tk] additive logits of ``bias`` for 0-based positions query_pos int [Tq], key_pos int [Tk]:
    gamma * log(i / P) for 1-based query i > P on keys j <= P, else 0."""
    query = (query_pos + 1).astype(position_dtype(dtype))[:, None]
    boost = bias.gamma * jnp.log(query / bias.prompt_len)
    on_prompt = (query > bias.prompt_len) & (key_pos[None, :] < bias.prompt_len)
    return jnp.where(on_prompt, boost, 0.0).astype(dtype)


def plain_attention(
    q: jax.Array, k: jax.Array, v: jax.Array, terms: LogitTerms | None = None
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """q [B, T, H, hd], k, v [B, T, Hkv, hd] -> (out [B, T, H, hd], logits [B, H, T, T], weights [B, H, T, T]).

    ``logits`` are q.k / sqrt(hd) (or ``terms.scale`` q.k), soft-capped where ``terms`` cap, before what positions add and the
    causal mask (what max |logit| reads); ``weights`` are the causal softmax of the logits with
    ``terms``' additions.
    """
    t, h, hd = q.shape[1:]
    # Repeated keys and values are T * H * hd numbers beside the T^2 * H weights, and XLA's CPU
    # backend runs this 4-d einsum 1.6x faster than one with the query group as a fifth axis.
    group = h // k.shape[2]
    k, v = jnp.repeat(k, group, axis=2), jnp.repeat(v, group, axis=2)
    logits = scaled(jnp.einsum("bqhd,bkhd->bhqk", q, k), hd, terms)
    if terms is not None:
        logits = soft_cap(logits, terms.softcap)
    pos = jnp.arange(t)
    slopes = None if terms is None or terms.alibi is None else jnp.asarray(terms.alibi)[:, None]  # [H, 1]
    added = added_logits(terms, pos, pos, slopes, logits.dtype)
    biased = logits if added is None else logits + added
    causal = pos[:, None] >= pos[None, :]
    weights = jax.nn.softmax(jnp.where(causal, biased, -jnp.inf), axis=-1)
    return jnp.einsum("bhqk,bkhd->bqhd", weights, v), logits, weights


def _tiles(x: jax.Array, n: int, size: int) -> jax.Array:
    """[B, T', heads, group, hd] with T' = n * size -> [n, B * heads, group * size, hd] (block-major).

    Query head h reads key/value head h // group: the group's heads become rows of one tile."""
    b, _, heads, group, hd = x.shape
    x = x.reshape(b, n, size, heads, group, hd).transpose(1, 0, 3, 4, 2, 5)
    return x.reshape(n, b * heads, group * size, hd)


def blockwise_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    terms: LogitTerms | None = None,
    *,
    block: int = DEFAULT_BLOCK,
    batch: int | None = None,
    lanes: int | None = None,
) -> jax.Array:
    """q [B, T, H, hd], k, v [B, T, Hkv, hd] -> out [B, T, H, hd]: causal softmax attention, online.

    ``block``: the most positions per query and key block (the blocks are made as equal as an even
    count of them allows, in multiples of 8). Any T works: the sequence is padded with positions
    after the last, which no real query can see.
    ``batch``: row pairs each loop step computes at once, vectorised (None: 1 on a CPU, where a
    tile stays in cache; all of them elsewhere, to fill an accelerator).
    ``lanes``: the B * Hkv (sequence, key/value head) tiles of a step are cut into this many
    separate operations (None: up to ``CPU_LANES`` on a CPU, 1 elsewhere). XLA's CPU runtime
    runs independent operations of a loop step side by side, one per core, where it runs one
    batched operation of these sizes on one core (docs/benchmarks.md).
    """
    check_int("block", block)
    for name, value in (("batch", batch), ("lanes", lanes)):
        if value is not None:
            check_int(name, value)
    b, t, h, hd = q.shape
    kv_heads = k.shape[2]
    group = h // kv_heads
    n = 2 * -(-t // (2 * block))  # even: query blocks r and n-1-r make one row pair
    size = 8 * -(-t // (8 * n))  # <= block, padding under 8 per block: T = 4112 is not cut into 4608
    pad = [(0, 0), (0, n * size - t), (0, 0), (0, 0), (0, 0)]
    cpu = jax.default_backend() == "cpu"
    lanes = min(b * kv_heads, lanes or (CPU_LANES if cpu else 1))
    cuts = np.linspace(0, b * kv_heads, lanes + 1).astype(int)
    spans = [slice(lo, hi) for lo, hi in zip(cuts[:-1], cuts[1:])]  # each lane's tiles of the B * Hkv

    def lane_tiles(x):  # [B, T, Hkv, G, hd] -> per lane [n, tiles of the lane, G * size, hd]
        tiles = _tiles(jnp.pad(x, pad), n, size)
        return [tiles[:, span] for span in spans]

    # Scaling q (T * hd products) instead of the logits (T^2 / 2) moves a rounding, nothing more.
    q = scaled(q, hd, terms)
    q_tiles = lane_tiles(q.reshape(b, t, kv_heads, group, hd))
    k_tiles, v_tiles = lane_tiles(k[:, :, :, None]), lane_tiles(v[:, :, :, None])
    row_offset = jnp.tile(jnp.arange(size), group)  # position within a block of each folded row
    key_offset = jnp.arange(size)
    # ALiBi's slope of each folded row: rows g * size .. (g + 1) * size - 1 of kv head k are query
    # head k * group + g; tile i is kv head i % Hkv of sequence i // Hkv.
    if terms is None or terms.alibi is None:
        lane_slopes = [None] * lanes
    else:
        slopes = jnp.repeat(jnp.asarray(terms.alibi).reshape(kv_heads, group), size, axis=1)  # [Hkv, G*size]
        slopes = jnp.tile(slopes, (b, 1))  # [B * Hkv, G*size]
        lane_slopes = [slopes[span] for span in spans]

    def fold(state, q_tile, k_tile, v_tile, slope, q_pos, k_pos, diagonal: bool):
        """One lane's tile into its online-softmax state: running max and sum [tiles, rows],
        unnormalised output [tiles, rows, hd]."""
        top, l_sum, acc = state
        logits = jnp.einsum("hqd,hkd->hqk", q_tile, k_tile)
        if terms is not None:
            logits = soft_cap(logits, terms.softcap)
        added = added_logits(terms, q_pos, k_pos, slope, logits.dtype)
        if added is not None:  # a window's -inf never empties a row: its diagonal tile came first
            logits = logits + added
        if diagonal:  # the only tiles with masked entries; masking every tile would cost ~15 %
            logits = jnp.where(q_pos[:, None] >= k_pos[None, :], logits, -jnp.inf)
        new_top = jnp.maximum(top, logits.max(-1))  # finite: every row sees a key
        p = jnp.exp(logits - new_top[..., None])
        rescale = jnp.exp(top - new_top)  # 0 on a block's first tile (top = -inf)
        l_sum = rescale * l_sum + p.sum(-1)
        acc = rescale[..., None] * acc + jnp.einsum("hqk,hkd->hqd", p, v_tile)
        return new_top, l_sum, acc

    def update(state, q_block, k_block, diagonal: bool):
        """Fold tile (q_block, k_block) of every lane into a query block's per-lane states."""
        q_pos, k_pos = q_block * size + row_offset, k_block * size + key_offset
        return [fold(lane_state, q_lane[q_block], k_lane[k_block], v_lane[k_block], slope, q_pos, k_pos, diagonal)
                for lane_state, q_lane, k_lane, v_lane, slope in zip(state, q_tiles, k_tiles, v_tiles, lane_slopes)]

    def empty_lane(x):
        rows = x.shape[1:3]
        return jnp.full(rows, -jnp.inf, q.dtype), jnp.zeros(rows, q.dtype), jnp.zeros((*rows, hd), q.dtype)

    empty = [empty_lane(x) for x in q_tiles]

    def row_pair(r):
        """Query blocks r and n-1-r: their diagonal tiles, then n - 1 tiles below the diagonal in
        one scan -> outputs [2, B * Hkv, G*size, hd]."""
        own = jnp.stack([r, n - 1 - r])
        diagonal = jax.vmap(lambda i: update(empty, i, i, diagonal=True))(own)
        take = lambda i: jax.tree_util.tree_map(lambda x: x[i], diagonal)

        def step(carry, s):
            # Steps 0..r-1: block r on keys 0..r-1; from step r on, block n-1-r on keys 0..n-2-r.
            state, first = carry
            fresh = s == r
            first = jax.tree_util.tree_map(lambda a, b: jnp.where(fresh, a, b), state, first)
            state = jax.tree_util.tree_map(lambda a, b: jnp.where(fresh, a, b), take(1), state)
            second = s >= r
            state = update(state, jnp.where(second, n - 1 - r, r), jnp.where(second, s - r, s), diagonal=False)
            return (state, first), None

        (state, first), _ = jax.lax.scan(step, (take(0), take(0)), jnp.arange(n - 1))
        normalised = lambda lanes_state: jnp.concatenate([acc / l_sum[..., None] for _, l_sum, acc in lanes_state])
        return jnp.stack([normalised(first), normalised(state)])

    batch = batch or (1 if cpu else n // 2)
    pairs = jax.lax.map(row_pair, jnp.arange(n // 2), batch_size=batch)  # [n/2, 2, B * Hkv, G*size, hd]
    blocks = jnp.concatenate([pairs[:, 0], pairs[::-1, 1]])  # block order 0..n-1
    out = blocks.reshape(n, b, kv_heads, group, size, hd).transpose(1, 0, 4, 2, 3, 5)
    return out.reshape(b, n * size, h, hd)[:, :t]
