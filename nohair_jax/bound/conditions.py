"""The no-hair bound's conditions measured on a model, and its explicit form (docs/definitions.md#bound).

The derivation is ``nohair_jax.theory.bound`` (``docs/bound.md``). One pre-LN block satisfies

    delta_l(i) <= a_l delta_{l-1}(i) + (b_l / i) (P D_{l-1} + sum_{P < j <= i} delta_{l-1}(j))

with ``a_l``, ``b_l`` closed forms of what is measured here: the largest attention logit ``B_l``,
the floor ``sigma_min`` of every norm's input scale, the norms' gains and biases, the operator
norms of the weights, and the prompt offsets ``D_l``. Unrolled (``nohair_jax.relay.offsets`` with
``residual=a, direct=relay=b``) it bounds the offset at every layer and continuation position;
``C_l P (log t)^(l-1) / t`` bounds it for ``t >= t_0 = max(P, 3)``.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from nohair_jax import relay
from nohair_jax.config import BlockLayout
from nohair_jax.model import Probe, Transformer
from nohair_jax.offsets import check_pairs, map_pairs
from nohair_jax.theory import bound as theory

ATTENTION_WEIGHTS = ("q", "k", "v", "o")
MLP_WEIGHTS = ("up", "gate", "down")


class BoundNotApplicable(ValueError):
    """The explicit bound is not derived for this model (``BoundConditions.not_derived``, infinite constants)."""


# A logit scale within this relative difference of 1/sqrt(d_head) is that scale: a config's scale written as a
# float (Gemma's query_pre_attn_scalar^-0.5, maybe rounded to float32) is not another scale.
SCALE_RTOL = 1e-6


@dataclasses.dataclass(frozen=True)
class Condition:
    """One condition of the theorem judged on one model: what it asks, what the model has (one line: the
    values the verdict was taken on) and one sentence per way it fails; it holds where there is none."""

    asks: str
    has: str
    failures: tuple[str, ...] = ()

    @property
    def holds(self) -> bool:
        return not self.failures

    def to_dict(self) -> dict:
        return {"asks": self.asks, "has": self.has, "holds": self.holds, "failures": list(self.failures)}


@dataclasses.dataclass(frozen=True)
class BoundConditions:
    """What the bound is stated in, measured on one model and one set of prompt pairs.

    Norms are listed in forward order: each block's ``norm_names()``, then the final norm if any;
    only the block norms enter the bound (``h_L`` is taken before the final norm).

    logit_bound:    [L] ``B_l``, the largest ``|q.k| / sqrt(d_head)`` over heads, causal pairs,
                    pairs and both runs (before any prompt logit bias).
    sigma_min:      [n_norms] smallest input scale of each norm (std for LayerNorm, rms for
                    RMSNorm, eps excluded; units of h) over positions, pairs and both runs.
    gain:           [n_norms] largest ``|scale|`` of each norm.
    norm_bias:      [n_norms] Euclidean norm of each norm's bias (0 without one).
    weight_norms:   name -> [L] spectral norms (largest singular values, float64) of the kernels
                    q, k, v, o, up, gate, down (k, v over the kv heads; gate 0 unless swiglu).
    bias_norms:     name -> [L] Euclidean norms of the q, k, up, gate biases (0 without one).
    prompt_offsets: [L+1] ``D_l``, max over prompt positions and pairs of ``||h_l(a)[j] - h_l(b)[j]||``.
    alibi, sliding_window, qk_norm: the architecture contrasts (docs/contrasts.md) the model has;
                    ``sliding_window`` only where it is shorter than the pairs' sequences.
    layout:         the block's layout (``config.BlockLayout``): where its norms sit, parallel or sequential.
    attn_scale:     the config's logit scale (Gemma's), None for 1 / sqrt(d_head); one within ``SCALE_RTOL``
                    of 1 / sqrt(d_head) is that scale (``other_scale``).
    attn_softcap:   the soft cap c of the attention logits (Gemma 2's), else None: B < c by construction.
    """

    prompt_len: int
    layout: BlockLayout
    mlp: str
    prompt_logit_bias: bool
    norm_eps: float
    d_model: int
    head_dim: int
    group: int
    logit_bound: np.ndarray
    sigma_min: np.ndarray
    gain: np.ndarray
    norm_bias: np.ndarray
    weight_norms: dict[str, np.ndarray]
    bias_norms: dict[str, np.ndarray]
    prompt_offsets: np.ndarray
    alibi: bool = False
    sliding_window: int | None = None
    qk_norm: bool = False
    attn_scale: float | None = None
    attn_softcap: float | None = None

    @property
    def n_layers(self) -> int:
        return len(self.logit_bound)

    @property
    def floor(self) -> float:
        """The threshold a norm's input scale must stay above: ``sqrt(norm_eps)``. Below it the eps
        in the norm's denominator dominates: the norm no longer normalises, its input is near zero."""
        return math.sqrt(self.norm_eps)

    def block_norm_names(self) -> tuple[str, ...]:
        """The norms of one block in forward order, as ``sigma_min`` lists them."""
        return tuple(slot.name for slot in self.layout.norms())

    def by_sublayer(self, values: np.ndarray, reduce=np.min) -> dict[str, np.ndarray]:
        """One per-norm array (``sigma_min``, ``gain``, ``norm_bias``: [n_norms], the block norms in forward order,
        then the final norm) per layer and sublayer: {"attention": [L], "mlp": [L]}, ``reduce`` over a sublayer's
        norms where it has two (sandwich)."""
        slots = self.layout.norms()
        per_layer = values[: len(slots) * self.n_layers].reshape(self.n_layers, len(slots))
        return {sublayer: reduce(per_layer[:, [k for k, slot in enumerate(slots) if slot.sublayer == sublayer]], axis=1)
                for sublayer in ("attention", "mlp")}

    def sigma_by_sublayer(self) -> dict[str, np.ndarray]:
        """``sigma_min`` per layer and sublayer, the smaller where a sublayer has two norms (``by_sublayer``)."""
        return self.by_sublayer(self.sigma_min)

    def notes(self) -> list[str]:
        """What the architecture guarantees that a reader of B should know."""
        if self.attn_softcap is None:
            return []
        return [f"attention logits soft-capped at {self.attn_softcap:g}: c tanh(logit / c), so B < {self.attn_softcap:g} "
                "by construction (and, c tanh(z / c) being 1-Lipschitz, no constant of the derivation grows)"]

    def other_scale(self) -> bool:
        """Whether the logits are scaled otherwise than by 1 / sqrt(d_head), beyond ``SCALE_RTOL``."""
        return self.attn_scale is not None and not math.isclose(self.attn_scale, self.head_dim ** -0.5,
                                                                rel_tol=SCALE_RTOL)

    def _architecture(self) -> list[tuple[str, str | None]]:
        """(reason, the condition it breaks) for each part of the architecture the explicit bound is not
        derived for; the condition is "placement", "logits" or "keys" (``conditions``), None where the
        part breaks none and only the constants are not derived for it."""
        reasons, layout = [], self.layout
        if layout.output_norms:
            reasons.append((f"norms on the sublayers' outputs ({layout}, OLMo 2's and Gemma's): the bound is derived "
                            "for x + Attn(N(x)); here each sublayer's output is normalised before the residual add, "
                            "which bounds what it adds, and the constants are not derived for it"
                            + ("" if layout.input_norms else " nor for attention that reads the unnormalised stream"),
                            None))
        elif layout.normalises_stream:
            reasons.append((f"not pre-LN ({layout}): the bound is derived for blocks x + Attn(N(x)), x' + MLP(N(x')); "
                            "post-LN normalises the residual stream itself", "placement"))
        if self.prompt_logit_bias:
            reasons.append(("prompt logit bias: gamma log(i/P) is added to the prompt logits, which are then not "
                            "bounded uniformly in i, so no weight is bounded by e^(2B)/i", "logits"))
        if self.alibi:
            reasons.append(("ALiBi: -m_h (i - j) is added to the logits, which are then not bounded uniformly in i; "
                            "a key's weight falls off exponentially in i - j, not as e^(2B)/i", "logits"))
        if self.sliding_window is not None:
            reasons.append((f"sliding window of {self.sliding_window}: the bound's weights e^(2B)/i are derived for "
                            "attention over every earlier key; in a window they are about 1/window", "keys"))
        if self.qk_norm:
            reasons.append(("QK-norm: the logits are bounded by construction, but the explicit constants are "
                            "derived for logits linear in the normalised input (w_q, w_k), not normalised again", None))
        if layout.parallel:
            reasons.append(("parallel residual (GPT-NeoX): the bound is derived for blocks x' = x + Attn(N(x)), "
                            "x' + MLP(N(x')) in sequence; in x + Attn(N(x)) + MLP(N(x)) the MLP reads the block's "
                            "input, and the constants are not derived for it", None))
        if self.other_scale():
            reasons.append((f"attention logits scaled by {self.attn_scale:.6g}, not 1/sqrt(d_head) = "
                            f"{self.head_dim ** -0.5:.6g} (relative difference "
                            f"{abs(self.attn_scale * self.head_dim ** 0.5 - 1):.2g}, above {SCALE_RTOL:g}): the "
                            "constants are derived for the latter", None))
        return reasons

    def not_derived(self) -> list[str]:
        """Why the explicit bound's constants are not derived for this model; empty when they are."""
        return [reason for reason, _ in self._architecture()]

    def conditions(self) -> list[Condition]:
        """The theorem's conditions judged on this model, in the order ``failures`` and the report give
        them: a residual stream that is not itself normalised (not post-LN), attention logits bounded
        uniformly in i, attention over every earlier key, block-norm inputs above sqrt(eps). Each
        ``Condition.has`` shows the values its verdict was taken on."""
        broken = {}
        for reason, condition in self._architecture():
            broken.setdefault(condition, []).append(reason)
        logits = broken.get("logits", []) + [f"layer {layer}: the largest |logit| is {value}, not finite"
                                             for layer, value in enumerate(self.logit_bound, start=1)
                                             if not np.isfinite(value)]
        names = self.block_norm_names()
        sigma = self.sigma_min[: len(names) * self.n_layers]
        norms = [f"layer {k // len(names) + 1} {names[k % len(names)]} norm: input scale floor sigma_min = {value:.3g} "
                 f"is not above sqrt(eps) = {self.floor:.3g}" for k, value in enumerate(sigma) if not value > self.floor]
        per_layer = "; ".join(", ".join(f"{v:.3g}" for v in sigma[k:k + len(names)])
                              for k in range(0, len(sigma), len(names)))
        added = "".join(f"; {name} added" for name, present in (("a prompt logit bias", self.prompt_logit_bias),
                                                                 ("ALiBi", self.alibi)) if present)
        window = "no window shorter than the sequences" if self.sliding_window is None else (
            f"a sliding window of {self.sliding_window}")
        return [
            Condition("the residual stream itself not normalised (not post-LN)", str(self.layout),
                      tuple(broken.get("placement", ()))),
            Condition("attention logits bounded uniformly in i", f"B_l (largest |logit|), layers 1..{self.n_layers}: "
                      + " ".join(f"{v:.3g}" for v in self.logit_bound) + added, tuple(logits)),
            Condition("attention over every earlier key", window, tuple(broken.get("keys", ()))),
            Condition(f"norm inputs away from zero (sigma_min above sqrt(eps) = {self.floor:.3g})",
                      f"sigma_min ({', '.join(names)} norm per layer): {per_layer}", tuple(norms)),
        ]

    def failures(self) -> list[str]:
        """One sentence per way a condition of the theorem fails (``conditions``); empty when all hold."""
        return [reason for condition in self.conditions() for reason in condition.failures]

    def block_values(self) -> dict[str, np.ndarray]:
        """Per-layer values ``[L]`` of every symbol of ``theory.bound.BLOCK_SYMBOLS``."""
        # The worst case over a sublayer's norms (the derivation has one per sublayer: coefficients refuses the rest).
        sigma = self.sigma_by_sublayer()
        gain, beta = self.by_sublayer(self.gain, np.max), self.by_sublayer(self.norm_bias, np.max)
        w, bias = self.weight_norms, self.bias_norms
        return dict(
            B=self.logit_bound, sigma_attn=sigma["attention"], sigma_mlp=sigma["mlp"], g_attn=gain["attention"],
            g_mlp=gain["mlp"], beta_attn=beta["attention"], beta_mlp=beta["mlp"],
            d=self.d_model, d_head=self.head_dim, G=self.group, w_q=w["q"], w_k=w["k"], w_v=w["v"], w_o=w["o"],
            b_q=bias["q"], b_k=bias["k"], w_up=w["up"], w_gate=w["gate"], w_down=w["down"], b_up=bias["up"],
            b_gate=bias["gate"],
        )

    def to_dict(self) -> dict:
        """Plain data for JSON, with the judged conditions (``checked``), their failures and the floor."""
        return {**dataclasses.asdict(self), "floor": self.floor, "checked": [c.to_dict() for c in self.conditions()],
                "failures": self.failures(),
                "not_derived": self.not_derived(), "notes": self.notes(), "block_norms": list(self.block_norm_names())}


class BoundQuantities(Probe):
    """What the bound is stated in, read inside the forward pass (docs/definitions.md#bound).

    ``norms`` [n_norms, B, T]: the input scale of every norm (standard deviation for layernorm, root mean
    square for rmsnorm, eps excluded); its minimum is ``sigma_min``. ``attention`` [L, B]: the largest
    |logit| (q.k / sqrt(head_dim), or ``attn_scale`` q.k, soft-capped where the model caps) over heads and
    the (query, key) pairs attention reads (causal, in the window if any), before what positions add;
    its maximum is ``B``.
    """

    def read_attention(self, logits, weights, reads):
        return jnp.max(jnp.where(reads, jnp.abs(logits), 0.0), axis=(1, 2, 3))

    def read_norms(self, scales):
        return scales


def _pair_conditions(model: Transformer, a: jax.Array, b: jax.Array, c: jax.Array):
    """Traceable per-pair core: int [k, P], [k, P], [k, T] -> the residual streams at the prompt's
    positions [k, L+1, 2, P, D] (runs a+c, b+c), the smallest input scale of every norm over both
    runs and all positions [k, n_norms], the largest |attention logit| per layer [k, L]."""
    k, prompt_len = a.shape
    out = model(jnp.concatenate([jnp.concatenate([a, c], 1), jnp.concatenate([b, c], 1)]), probe=BoundQuantities())
    # [n, 2k, ...] (runs a+c of every pair, then b+c) -> [k, n, 2, ...]
    per_pair = lambda x: jnp.moveaxis(x.reshape(x.shape[0], 2, k, *x.shape[2:]), 2, 0)  # noqa: E731
    return (per_pair(out.hidden[:, :, :prompt_len]), per_pair(out.norms).min(axis=(2, 3)),
            per_pair(out.attention).max(axis=2))


def _spectral(param) -> float:
    """Largest singular value of a kernel, in float64: the square root of the largest eigenvalue of
    the smaller Gram matrix. Equal to ``np.linalg.norm(W, 2)`` to rounding (the tests hold it against
    ``np.linalg.svd``) and many times faster where LAPACK's SVD of a wide matrix crawls on a busy CPU."""
    w = np.asarray(param[...], np.float64)
    gram = w @ w.T if w.shape[0] <= w.shape[1] else w.T @ w
    return float(np.sqrt(max(np.linalg.eigvalsh(gram)[-1], 0.0)))


def _length(param) -> float:
    return 0.0 if param is None else float(np.linalg.norm(np.asarray(param[...], np.float64)))


def measure_conditions(model: Transformer, prompts_a, prompts_b, continuations) -> BoundConditions:
    """Measure the bound's conditions on ``model`` with prompt pairs (shapes as ``prompt_pair_offsets``).

    Runs ``a+c`` and ``b+c`` of each pair with ``BoundQuantities`` through ``offsets.map_pairs``
    (one compiled call per pair, full matmul precision); weights are read in float64. Prompts must
    have equal length ``P``.
    """
    cfg = model.config
    a, b, c = check_pairs(cfg, prompts_a, prompts_b, continuations)
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"the bound compares prompts_a and prompts_b of equal length, got P_a={a.shape[1]} and P_b={b.shape[1]}")
    prompt_len = a.shape[1]
    hidden, scales, logits = map_pairs(_pair_conditions, model, a, b, c)
    hidden = hidden.astype(np.float64)  # [n, L+1, 2, P, D]: the prompt offsets in float64
    offsets = np.linalg.norm(hidden[:, :, 0] - hidden[:, :, 1], axis=-1).max(axis=-1)  # [n, L+1]

    blocks = list(model.blocks)
    norms = [getattr(blk, slot.attribute) for blk in blocks for slot in cfg.layout.norms()]
    if model.final_norm is not None:
        norms.append(model.final_norm)
    linear = {name: [getattr(blk.attn, name) for blk in blocks] for name in ATTENTION_WEIGHTS}
    linear.update({name: [getattr(blk.mlp, name) for blk in blocks] for name in MLP_WEIGHTS})
    return BoundConditions(
        prompt_len=prompt_len,
        layout=cfg.layout,
        mlp=cfg.mlp,
        prompt_logit_bias=cfg.prompt_logit_bias is not None,
        norm_eps=float(cfg.norm_eps),
        d_model=cfg.d_model,
        head_dim=cfg.head_dim,
        group=cfg.n_heads // cfg.kv_heads,
        logit_bound=np.max(logits, axis=0).astype(np.float64),
        sigma_min=np.min(scales, axis=0).astype(np.float64),
        gain=np.array([np.abs(np.asarray(n.scale[...], np.float64)).max() for n in norms]),
        norm_bias=np.array([_length(n.bias) for n in norms]),
        weight_norms={name: np.array([0.0 if m is None else _spectral(m.kernel) for m in mods])
                      for name, mods in linear.items()},
        bias_norms={name: np.array([0.0 if m is None else _length(m.bias) for m in linear[name]])
                    for name in ("q", "k", "up", "gate")},
        prompt_offsets=np.max(offsets, axis=0),
        alibi=cfg.position == "alibi",
        sliding_window=cfg.sliding_window if (cfg.sliding_window or math.inf) < prompt_len + c.shape[1] else None,
        qk_norm=cfg.qk_norm,
        attn_scale=cfg.attn_scale,
        attn_softcap=cfg.attn_softcap,
    )


def coefficients(cond: BoundConditions) -> tuple[np.ndarray, np.ndarray]:
    """Block coefficients ``a [L]``, ``b [L]`` (dimensionless) from the measured conditions.

    Raises ``BoundNotApplicable`` where the derivation does not cover the model (``not_derived``:
    post-LN, a prompt logit bias, ALiBi, a sliding window, QK-norm, output norms, a parallel block, another logit scale) or a constant is infinite (an infinite logit, a norm input of scale exactly 0).
    A floor below ``sqrt(eps)`` is reported by ``failures()`` but still gives a (huge) valid bound.
    """
    if cond.not_derived():
        raise BoundNotApplicable("; ".join(cond.not_derived()))
    a, b = theory.block_coefficients(cond.mlp, **cond.block_values())
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise BoundNotApplicable(f"infinite block coefficients (a = {a}, b = {b}): {'; '.join(cond.failures())}")
    return a, b


def explicit_bounds(cond: BoundConditions, length: int) -> dict[str, np.ndarray | int]:
    """The explicit bound at continuation positions ``t = 1..length``, in the units of h.

    Returns ``a``, ``b`` [L]; ``C`` [L] (``C_l``); ``t0`` (the closed form's first position);
    ``recursion`` [L+1, T], the block recursion unrolled with the measured ``D_0..D_{L-1}``
    (valid at every ``t``); ``closed`` [L+1, T], ``C_l P (log t)^(l-1) / t`` (nan for ``t < t0``).
    """
    a, b = coefficients(cond)
    prompt_len, depth = cond.prompt_len, cond.n_layers
    prompt = cond.prompt_offsets[:-1]
    recursion = np.asarray(relay.offsets(prompt_len, length, depth, residual=a, direct=b, relay=b, prompt_offset=prompt))
    constant = theory.explicit_constant(a, b, prompt, prompt_len)
    t0 = theory.explicit_threshold(prompt_len)
    t = np.arange(1, length + 1, dtype=np.float64)
    layer = np.arange(1, depth + 1)[:, None]
    closed = np.full((depth + 1, length), np.nan)
    closed[0] = 0.0
    # C_l beyond float64 (real models: e^(2B) with B in the tens) gives inf, as it should: no warning
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        closed[1:] = np.where(t >= t0, constant[:, None] * prompt_len * np.log(t) ** (layer - 1) / t, np.nan)
    return dict(a=a, b=b, C=constant, t0=t0, recursion=recursion, closed=closed)
