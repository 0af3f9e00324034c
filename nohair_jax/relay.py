"""The linear relay model: the offset recursion of docs/definitions.md#bound, solved.

Positions are 1-based. The prompt occupies absolute positions ``1..P`` and continuation
position ``t = 1..T`` sits at absolute position ``n = P + t``. ``delta_l(t)`` is the offset
(the difference between the two runs' hidden states, a scalar here because the model is
linear and every difference points the same way) at layer ``l`` and continuation position
``t``; ``D_l`` is the offset on every prompt position. One block maps layer ``l - 1`` to
layer ``l``:

    delta_l(n) = a_l * delta_{l-1}(n)
                 + (1 / n) * ( direct_l * P * D_{l-1} + relay_l * sum_{P < j <= n} delta_{l-1}(j) )

``a_l`` is the token's own path (residual stream), ``direct_l`` scales the direct read of the
prompt and ``relay_l`` the read of earlier continuation tokens, both diluted by ``1 / n``.
``delta_0 = 0`` (same token, same position) and ``D_0`` is the offset of the embeddings on
the prompt.

The exactly solvable model is uniform causal averaging with identity values: ``a = 0``
(``residual=False``) or ``a = 1`` (``residual=True``), ``direct = relay = 1``, ``D_0 = 1``.
A prompt position ``i <= P`` only sees prompt positions, each carrying ``D_{l-1}``, so
``D_l = (a + 1) D_{l-1}``: unit prompt offsets stay 1 without residual and double at every
layer with it (``D_l = 2^l``). With general coefficients a scalar ``prompt_offset`` is ``D_0``
propagated by the same rule, ``D_l = (a_l + direct_l) D_{l-1}`` (the block's own bound at a
prompt position, where every key is a prompt key); a ``[depth]`` array gives
``D_0..D_{depth-1}`` layer by layer (measured, or held constant with ``jnp.full``).

Closed forms (derived and checked in ``nohair_jax.theory.relay``), with
``h_k = h_k(1/(P+1), ..., 1/n)`` the complete homogeneous symmetric polynomials,
``p_i = H_n^(i) - H_P^(i)`` (``p_1 = psi(n+1) - psi(P+1)``,
``p_i = zeta(i, P+1) - zeta(i, n+1)``, valid for real ``n``) and Newton's identities
``k h_k = sum_{i=1..k} p_i h_{k-i}``:

    no residual:   delta_L(n) = (P / n) * e_L(n),   e_L = sum_{k < L} h_k
    residual:      delta_L(n) = sum_{j=1..L} C(L, j) * delta_j^{no residual}(n)
                              = (P / n) * sum_{k < L} h_k * sum_{j > k} C(L, j)

Depth matters: ``sum_k h_k = n / P``, so ``delta_L(n) = Pr[N_n < L]`` without residual, where
``N_n`` is a sum of independent geometric counts with mean ``H_{n-1} - H_{P-1} ~ log(n / P)``.
While ``L`` is comparable to ``log(t / P)`` the offset stays close to 1 (``2^L - 1`` with
residual) and barely decays; the bound's shape ``P (log t)^(L-1) / t`` only bites for
``t >> P e^L``.

Everything is computed in float64 (inside ``jax.enable_x64(True)``, so callers need not
enable x64 globally); offsets are propagated as differences, never as two runs subtracted.
The jax results are float64 arrays: further jnp arithmetic outside x64 mode truncates them to
float32, so convert with ``np.asarray`` or keep working inside ``jax.enable_x64(True)``.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import digamma, zeta

from nohair_jax.checks import real_array

__all__ = ["offsets", "offsets_exact", "closed_form", "asymptotic", "local_exponent"]


def offsets(prompt_len, length, depth, *, residual=False, direct=1.0, relay=1.0, prompt_offset=1.0):
    """Offsets ``delta_l(t)`` of the relay recursion, by cumulative sums in O(depth * length).

    Args:
      prompt_len: ``P >= 1``, prompt length in tokens (static).
      length: ``T >= 1``, number of continuation positions ``t = 1..T`` (static).
      depth: ``L >= 0``, number of blocks (static).
      residual: the own-path coefficient ``a_l``: ``False``/``True`` mean 0/1 (the solvable
        models); a float or a ``[depth]`` array gives the bound's general ``a_l``.
      direct: ``direct_l``, scalar or ``[depth]``: multiplies the prompt read ``P D_{l-1} / n``.
      relay: ``relay_l``, scalar or ``[depth]``: multiplies the continuation read
        ``sum_{P<j<=n} delta_{l-1}(j) / n``.
      prompt_offset: scalar ``D_0`` propagated as ``D_l = (a_l + direct_l) D_{l-1}``, or a
        ``[depth]`` array ``D_0..D_{depth-1}`` used as given.

    Returns:
      float64 array ``[depth + 1, length]``; row ``l`` is layer ``l``, column ``t - 1`` is
      continuation position ``t`` (absolute position ``P + t``); row 0 is all zeros. Units are
      those of ``prompt_offset``.

    The difference itself is propagated (the model is linear), so small offsets keep full
    relative precision; against the closed form the relative error is ~1e-15 at ``T = 1e5``.
    Deep stacks barely decay: without residual every row stays at most 1 and is close to 1
    while ``log(t / P) < L``.
    """
    if prompt_len < 1 or length < 1 or depth < 0:
        raise ValueError(f"need prompt_len >= 1, length >= 1, depth >= 0; got {prompt_len}, {length}, {depth}")
    coefficients = [_coefficient(name, value, depth) for name, value in
                    (("residual", residual), ("direct", direct), ("relay", relay), ("prompt_offset", prompt_offset))]
    with jax.enable_x64(True):
        return _offsets(prompt_len, length, depth, *(jnp.asarray(c, dtype=jnp.float64) for c in coefficients))


def _coefficient(name: str, value, depth: int):
    """A coefficient of ``offsets``: one finite real number (``residual`` may be a bool) or ``[depth]``
    of them; ValueError/TypeError naming it otherwise. Under ``jit`` (a traced value) its dtype and
    shape are checked, not its values."""
    traced = isinstance(value, jax.core.Tracer)
    if isinstance(value, (bool, np.bool_)):
        arr = np.float64(value)
    elif traced:
        if not (jnp.issubdtype(value.dtype, jnp.floating) or jnp.issubdtype(value.dtype, jnp.integer)):
            raise TypeError(f"{name} must hold real numbers, got dtype {value.dtype}")
        arr = value
    else:
        arr = real_array(name, value)
    if arr.ndim > 1 or (arr.ndim == 1 and arr.shape[0] not in (1, depth)):
        raise ValueError(f"{name} must be one number or an array [depth] = [{depth}], got shape {arr.shape}")
    if not traced and not np.isfinite(arr).all():
        raise ValueError(f"{name} must be finite, got {arr.ravel()[~np.isfinite(arr.ravel())][:3].tolist()} among its values")
    return arr


@functools.partial(jax.jit, static_argnames=("prompt_len", "length", "depth"))
def _offsets(prompt_len, length, depth, own, direct, relay, prompt_offset):
    own, direct, relay = (jnp.broadcast_to(c, (depth,)) for c in (own, direct, relay))
    if prompt_offset.ndim == 0:
        gains = jnp.concatenate([jnp.ones(1), own + direct])
        prompt = prompt_offset * jnp.cumprod(gains)[:depth]
    else:
        prompt = jnp.broadcast_to(prompt_offset, (depth,))
    n = prompt_len + jnp.arange(1, length + 1, dtype=jnp.float64)

    def block(prev, coeffs):
        a, b_direct, b_relay, d = coeffs
        cur = a * prev + (b_direct * prompt_len * d + b_relay * jnp.cumsum(prev)) / n
        return cur, cur

    _, rows = jax.lax.scan(block, jnp.zeros(length), (own, direct, relay, prompt))
    return jnp.concatenate([jnp.zeros((1, length)), rows])


def offsets_exact(prompt_len, length, depth, *, residual=False):
    """The solvable model's offsets in exact rational arithmetic (small sizes only).

    Same recursion and layout as ``offsets`` with ``a = int(residual)``, ``direct = relay = 1``,
    ``D_0 = 1``: a list of ``depth + 1`` lists of ``length`` ``fractions.Fraction``; entry
    ``[l][t - 1]`` is ``delta_l(t)``. Cost O(depth * length) big-rational operations.
    """
    a = int(residual)
    rows = [[Fraction(0)] * length]
    prompt = Fraction(1)
    for _ in range(depth):
        running, cur = Fraction(0), []
        for t, prev in enumerate(rows[-1], start=1):
            running += prev
            cur.append(a * prev + (prompt_len * prompt + running) / (prompt_len + t))
        rows.append(cur)
        prompt *= 1 + a
    return rows


def _checked(prompt_len, t, depth, min_depth: int = 1) -> tuple[float, np.ndarray]:
    """``prompt_len`` as a float, ``t`` as a float64 array, or ValueError naming the bad input: the
    closed forms take one real ``P > 0`` (they are compiled per P: loop over several), positions
    ``t > 0`` and ``depth >= min_depth``."""
    size = real_array("prompt_len", prompt_len)
    if size.ndim != 0 or not np.isfinite(size) or not size > 0:
        raise ValueError(f"prompt_len must be one real number > 0 (loop over several), got {prompt_len!r}")
    if isinstance(depth, bool) or not isinstance(depth, (int, np.integer)) or depth < min_depth:
        raise ValueError(f"depth must be an integer >= {min_depth}, got {depth!r}")
    t = real_array("t", t).astype(np.float64)
    if not (np.isfinite(t) & (t > 0)).all():
        raise ValueError(f"t must hold finite positions > 0, got {t[~(np.isfinite(t) & (t > 0))][:3].tolist()} among them")
    return float(prompt_len), t


def closed_form(prompt_len, t, depth, *, residual=False):
    """``delta_depth(t)`` of the solvable model from its closed form in digamma and Hurwitz zeta.

    ``t`` is any real array of continuation positions (non-integer and huge ``t`` allowed:
    the harmonic sums are continued through ``psi`` and ``zeta``); ``prompt_len`` may be real
    too (one number: several P are several calls). Returns a float64 array of ``t``'s shape, in units
    of the embedding offset ``D_0``. Cost O(depth^2) special-function evaluations per element.
    ValueError for ``t <= 0``, ``depth < 0`` or a ``prompt_len`` that is not one real number > 0
    (``depth`` 0 gives ``delta_0 = 0``).
    """
    prompt_len, t = _checked(prompt_len, t, depth, min_depth=0)
    with jax.enable_x64(True):
        return _closed_form(prompt_len, jnp.asarray(t), depth, bool(residual))


@functools.partial(jax.jit, static_argnames=("prompt_len", "depth", "residual"))
def _closed_form(prompt_len, t, depth, residual):
    n = prompt_len + t
    return prompt_len / n * _weighted_sum(_power_sums(prompt_len, n, depth - 1), _weights(depth, residual))


def asymptotic(prompt_len, t, depth, *, order=None, residual=False):
    """Large-``t`` expansion of ``delta_depth(t)``: ``(P / t)`` times a polynomial in ``log t``.

    ``order`` (1..depth, default depth) is how many powers of ``log t`` are kept, from the top:
    ``order=1`` is the leading term ``P (log t)^(L-1) / ((L-1)! t)`` (the same with residual),
    ``order=2`` adds ``(W + gamma - H_P) P (log t)^(L-2) / ((L-2)! t)`` with ``W = 1`` (no
    residual) or ``L + 1`` (residual), and so on. The coefficient of ``(log t)^m`` is
    ``sum_{k >= m} W_k f_{k-m} / m!``, with ``f_k = [z^k] Gamma(P+1-z) / Gamma(P+1)`` and
    ``W_k`` the closed form's weights.
    Dropping powers below ``order`` costs a relative ``O((log t)^-order)``; the full expansion
    drops only a relative ``O(P / t)`` (``n = P + t`` versus ``t``, the gamma ratio's ``1/n``).
    The truncated expansions are only useful for ``t >> P e^L``: where ``L`` is comparable to
    ``log(t / P)`` the offset is close to 1 and the leading term is far off.

    Evaluated in numpy (the coefficients are computed once per ``(P, depth, residual)`` and
    cached), so a call takes microseconds for any ``t >> P``, ``1e12`` and far beyond. ``t`` is
    a scalar or array; returns a numpy float64 array of its shape.
    """
    prompt_len, t = _checked(prompt_len, t, depth)
    order = depth if order is None else order
    if not 1 <= order <= depth:
        raise ValueError(f"order must be in 1..depth={depth}, got {order}")
    coefficients = np.array(_log_polynomial(prompt_len, depth, bool(residual)))
    coefficients[: depth - order] = 0.0
    return prompt_len / t * np.polynomial.polynomial.polyval(np.log(t), coefficients)


@functools.lru_cache(maxsize=None)
def _log_polynomial(prompt_len, depth, residual):
    """Coefficients ``a_0..a_{L-1}`` of ``delta_L(t) ~ (P / t) sum_m a_m (log t)^m``, floats.

    As ``n -> oo``, ``p_1 - log n -> -psi(P+1)`` and ``p_i -> zeta(i, P+1)``: the Gamma-ratio
    form of ``sum_k h_k z^k`` tends to ``n^z Gamma(P+1-z) / Gamma(P+1)``, whose
    z-coefficients are ``f_k``; ``h_k -> sum_{m <= k} (log n)^m / m! * f_{k-m}``.
    """
    with jax.enable_x64(True):
        f = [float(x) for x in _complete_homogeneous([-c for c in _tails(prompt_len + 1, depth - 1)])]
    w = _weights(depth, residual)
    return tuple(sum(w[k] * f[k - m] for k in range(m, depth)) / math.factorial(m) for m in range(depth))


def local_exponent(prompt_len, t, depth, *, residual=False):
    """Exact local exponent ``alpha(t) = -d log delta_depth / d log t`` of the solvable model.

    Analytic derivative of the closed form: ``dp_i/dn = i zeta(i+1, n+1)`` pushed through
    Newton's identities in forward mode, so it is exact up to float64 rounding at any real
    ``t > 0``.
    ``0 < alpha < 1`` at every finite ``t`` (the offset is ``P / (P + t)`` times a positive,
    increasing sum) and ``alpha -> 1`` only like ``1 - (L-1) / (log t + W + gamma - H_P)`` up to
    ``O((log t)^-3)``, with ``W = 1`` (no residual) or ``L + 1`` (residual): the log factors
    matter until ``t >> P e^L``. Returns dimensionless float64 of ``t``'s shape.
    """
    prompt_len, t = _checked(prompt_len, t, depth)  # depth >= 1: delta_0 = 0 has no exponent
    with jax.enable_x64(True):
        return _local_exponent(prompt_len, jnp.asarray(t), depth, bool(residual))


@functools.partial(jax.jit, static_argnames=("prompt_len", "depth", "residual"))
def _local_exponent(prompt_len, t, depth, residual):
    # delta = (P/n) S(p(n)) with S = sum_k W_k h_k, so alpha = t/n - t S'(n)/S, and
    # dp_i/dn = i zeta(i+1, n+1) exactly (d psi = zeta(2, .), d zeta(s, q)/dq = -s zeta(s+1, q)).
    n = prompt_len + t
    slopes = [i * zeta(float(i + 1), n + 1) for i in range(1, depth)]
    weighted_sum = functools.partial(_weighted_sum, weights=_weights(depth, residual))
    total, slope = jax.jvp(weighted_sum, (_power_sums(prompt_len, n, depth - 1),), (slopes,))
    return t / n - t * slope / total


def _tails(q, count):
    """``[psi(q), -zeta(2, q), ..., -zeta(count, q)]``, the ``q``-dependent parts of the power sums."""
    return [digamma(q)] + [-zeta(float(i), q) for i in range(2, count + 1)] if count >= 1 else []


def _power_sums(prompt_len, n, count):
    """``[p_1, ..., p_count]``, ``p_i = H_n^(i) - H_P^(i) = tails(n+1)_i - tails(P+1)_i`` (real n)."""
    return [hi - lo for hi, lo in zip(_tails(n + 1, count), _tails(prompt_len + 1, count))]


def _weighted_sum(power_sums, weights):
    """``sum_k W_k h_k`` (``k < len(weights)``) from ``[p_1, ..., p_{len(weights)-1}]``."""
    h = _complete_homogeneous(power_sums)
    return sum(w * hk for w, hk in zip(weights, h))


def _complete_homogeneous(power_sums):
    """``[h_0, ..., h_K]`` from power sums ``[p_1, ..., p_K]`` by Newton's identities.

    For the closed form every power sum is positive, so the recursion adds positive terms
    only and loses no precision; the asymptotic constants (``c_1 = gamma - H_P < 0``) are few.
    """
    h = [1.0]
    for k in range(1, len(power_sums) + 1):
        h.append(sum(power_sums[i - 1] * h[k - i] for i in range(1, k + 1)) / k)
    return h


def _weights(depth, residual):
    """Weights ``W_k``, ``k < depth``, with ``delta_depth = (P / n) sum_k W_k h_k``.

    No residual: ``W_k = 1``. Residual: ``W_k = sum_{j > k} C(L, j)`` (binomial sum of the
    no-residual layers, ``delta_L = sum_j C(L, j) delta_j``).
    """
    if not residual:
        return [1] * depth
    return [sum(math.comb(depth, j) for j in range(k + 1, depth + 1)) for k in range(depth)]
