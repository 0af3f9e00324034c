"""Token dynamics: self-attention as interacting particles, the feed-forward layer as a control.

docs/definitions.md#token-dynamics. Tokens are particles ``x_i``, ``i = 1..n``, in dimension ``d``, either on
the unit sphere (the idealised layer norm, ``sphere=True``) or in ``R^d``. Self-attention is
the interaction

    dx_i/dt = P_{x_i}( A_i(x) + u(x_i, t) ),
    A_i(x)  = sum_j softmax_j(<Q x_i, K x_j>) V x_j,

with ``P_x v = v - <x, v> x`` the projection onto the sphere's tangent space at ``x`` (the
identity when ``sphere=False``) and ``u`` a feed-forward control applied to every token
independently (it sees only its own token and the time), added before the projection.

Multi-head attention: ``Q, K, V`` of shape ``[heads, d, d]`` give one drift per head and the
drift is the **mean** over heads, ``A_i = (1 / heads) sum_h A_i^h``. Averaging (rather than
summing) keeps the drift's bound that of a single head (``mean_h ||V_h||``), so that a control
gain means the same thing whatever the number of heads, and identical heads reproduce the
single-head system exactly.

Integration is a fixed-step scheme (``"rk4"`` or ``"euler"``) inside ``lax.scan``. On the
sphere every step is followed by renormalising each token to unit norm: the projected field is
tangent, so the exact flow stays on the sphere and the scheme only leaves it by its own local
error (``O(dt^5)`` for RK4, ``O(dt^2)`` for Euler); renormalising is a projection back that
changes the state by no more than that error, so it keeps the scheme's order while stopping
the drift off the sphere from accumulating.

Everything here is a pure function of arrays: ``simulate`` can be jitted (with ``control``,
``steps``, ``sphere`` and ``method`` static, e.g. by closing over them) and vmapped over ``x0``
and over draws of ``(Q, K, V)`` (and over a control's gain, a traced value in its closure), and
so can every measure, ``n_clusters`` included.

Measures (``diameter``, ``mean_cosine``, ``n_clusters``, ``distance_to``) take one
configuration ``[n, d]`` or any batch of them, in particular a trajectory
``[steps + 1, n, d]``, and return one value per configuration. Shapes and dtypes are checked where
the arrays enter (ValueError/TypeError naming the argument); values are not (the functions are
traced under ``jit``): a NaN in gives NaN out.
"""

from __future__ import annotations

from typing import Callable, Optional

import jax
import jax.numpy as jnp
from jax import lax

from nohair_jax.checks import real_array

Control = Callable[[jax.Array, jax.Array], jax.Array]

__all__ = [
    "tangent_project",
    "attention_drift",
    "drift_bound",
    "simulate",
    "consensus_control",
    "cluster_control",
    "diameter",
    "mean_cosine",
    "n_clusters",
    "distance_to",
]


def _real(name: str, x) -> jax.Array:
    """``x`` as a jax array of real numbers: a jax array (traced or not) of integer or floating dtype
    passes as it is, anything else goes through ``checks.real_array`` (TypeError/ValueError naming it)."""
    if isinstance(x, jax.Array):
        if not (jnp.issubdtype(x.dtype, jnp.floating) or jnp.issubdtype(x.dtype, jnp.integer)):
            raise TypeError(f"{name} must hold real numbers, got dtype {x.dtype}")
        return x
    return jnp.asarray(real_array(name, x))


def _tokens(name: str, x, min_tokens: int = 1) -> jax.Array:
    """Configurations ``[..., n, d]`` with ``n >= min_tokens`` and ``d >= 1`` (shapes are static: jittable)."""
    x = _real(name, x)
    if x.ndim < 2 or x.shape[-2] < min_tokens or x.shape[-1] < 1:
        raise ValueError(f"{name} must have shape [..., n, d] with n >= {min_tokens} and d >= 1, got shape {x.shape}")
    return x


def _weights(names: tuple[str, ...], values, d: int | None = None) -> list[jax.Array]:
    """Attention weights ``[d, d]`` or ``[heads, d, d]`` (heads >= 1), all of one shape, d as given."""
    arrays = [_real(name, value) for name, value in zip(names, values)]
    for name, w in zip(names, arrays):
        if w.ndim not in (2, 3) or w.shape[-1] != w.shape[-2] or 0 in w.shape or (d is not None and w.shape[-1] != d):
            want = "d >= 1" if d is None else f"d = {d} (as x)"
            raise ValueError(f"{name} must have shape [d, d] or [heads, d, d] with {want}, got shape {w.shape}")
        if w.shape != arrays[0].shape:
            raise ValueError(f"{names[0]} and {name} must have one shape, got {arrays[0].shape} and {w.shape}")
    return arrays


def tangent_project(x: jax.Array, v: jax.Array) -> jax.Array:
    """``P_x v = v - <x, v> x`` row by row: ``x, v`` ``[..., d]`` -> ``[..., d]``.

    For unit ``x`` this is the orthogonal projection onto the sphere's tangent space at ``x``.
    """
    return v - jnp.sum(x * v, axis=-1, keepdims=True) * x


def _head_drift(x: jax.Array, Q: jax.Array, K: jax.Array, V: jax.Array) -> jax.Array:
    """One head: ``x`` ``[n, d]``, ``Q, K, V`` ``[d, d]`` -> ``A`` ``[n, d]``."""
    q = x @ Q.T  # [n, d], row i = Q x_i
    k = x @ K.T  # [n, d], row j = K x_j
    v = x @ V.T  # [n, d], row j = V x_j
    weights = jax.nn.softmax(q @ k.T, axis=-1)  # [n, n], softmax over keys j
    return weights @ v


def attention_drift(
    x: jax.Array, Q: jax.Array, K: jax.Array, V: jax.Array, *, sphere: bool = True
) -> jax.Array:
    """The self-attention drift: ``x`` ``[n, d]`` -> ``[n, d]``.

    ``A_i = sum_j softmax_j(<Q x_i, K x_j>) V x_j`` with ``Q, K, V`` ``[d, d]``; with
    ``[heads, d, d]`` the mean over heads of each head's drift. Projected onto the tangent
    space at each ``x_i`` when ``sphere=True``.
    """
    x = _tokens("x", x)
    if x.ndim != 2:
        raise ValueError(f"x must have shape [n, d], got shape {x.shape}")
    Q, K, V = _weights(("Q", "K", "V"), (Q, K, V), x.shape[-1])
    if Q.ndim == 3:
        drift = jnp.mean(jax.vmap(_head_drift, in_axes=(None, 0, 0, 0))(x, Q, K, V), axis=0)
    else:
        drift = _head_drift(x, Q, K, V)
    return tangent_project(x, drift) if sphere else drift


def drift_bound(V: jax.Array) -> jax.Array:
    """Bound ``b`` on the unprojected attention drift per unit token norm.

    ``V`` ``[d, d]`` -> ``||V||_2`` (the spectral norm); ``[heads, d, d]`` -> the mean over
    heads of ``||V_h||_2``. Because the softmax weights are non-negative and sum to one,
    ``|A_i| <= b max_j |x_j|`` (``= b`` on the sphere); the projection only shrinks it.
    """
    (V,) = _weights(("V",), (V,))
    norms = jnp.linalg.norm(V, ord=2, axis=(-2, -1))
    return jnp.mean(norms) if V.ndim == 3 else norms


def _normalise(x: jax.Array) -> jax.Array:
    return x / jnp.linalg.norm(x, axis=-1, keepdims=True)


def simulate(
    x0: jax.Array,
    Q: jax.Array,
    K: jax.Array,
    V: jax.Array,
    *,
    control: Optional[Control] = None,
    dt: float,
    steps: int,
    sphere: bool = True,
    method: str = "rk4",
) -> jax.Array:
    """Integrate the controlled particle system from ``t = 0`` with a fixed step.

    Args:
      x0: ``[n, d]`` initial tokens (unit rows when ``sphere=True``; not renormalised here).
      Q, K, V: ``[d, d]`` or ``[heads, d, d]`` (multi-head drift = mean over heads).
      control: ``u(x [n, d], t scalar) -> [n, d]``, applied token-wise and added to the
        attention drift before the tangent projection; ``None`` for no control.
      dt: step size. steps: number of steps (static). sphere: particles on the sphere
        (projected field, renormalised after every step) or in ``R^d``.
      method: ``"rk4"`` (classical fourth order) or ``"euler"`` (static).

    Returns:
      The trajectory ``[steps + 1, n, d]``; entry ``k`` is the state at ``t = k dt`` and
      entry ``0`` is ``x0``.
    """
    if method not in ("rk4", "euler"):
        raise ValueError(f"method must be 'rk4' or 'euler', got {method!r}")

    def field(x, t):
        v = attention_drift(x, Q, K, V, sphere=False)
        if control is not None:
            v = v + control(x, t)
        return tangent_project(x, v) if sphere else v

    def step(carry, _):
        x, t = carry
        if method == "euler":
            x_new = x + dt * field(x, t)
        else:
            k1 = field(x, t)
            k2 = field(x + 0.5 * dt * k1, t + 0.5 * dt)
            k3 = field(x + 0.5 * dt * k2, t + 0.5 * dt)
            k4 = field(x + dt * k3, t + dt)
            x_new = x + (dt / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
        if sphere:
            x_new = _normalise(x_new)
        return (x_new, t + dt), x_new

    x0 = jnp.asarray(x0)
    t0 = jnp.zeros((), dtype=x0.dtype)
    _, xs = lax.scan(step, (x0, t0), None, length=steps)
    return jnp.concatenate([x0[None], xs], axis=0)


def cluster_control(
    targets: jax.Array, assignment: jax.Array, *, gain: float = 1.0, sphere: bool = True
) -> Control:
    """A control driving token ``i`` towards ``targets[assignment[i]]``.

    ``targets`` ``[k, d]`` (unit rows on the sphere), ``assignment`` ``[n]`` ints in ``0..k-1``.
    Returns ``u(x [n, d], t) = gain * (targets[assignment] - x)`` ``[n, d]``; each token's
    control depends only on that token (and its fixed index), as a feed-forward layer's
    does. ``sphere`` is accepted for symmetry: ``simulate`` projects the total field, and
    ``P_x(y - x) = y - <x, y> x`` for unit ``x``. The analysis is that of
    ``consensus_control``, token by token: once ``gain > b`` every token that starts with
    angle below ``pi - arcsin(b / gain)`` from its target ends within angle
    ``arcsin(b / gain)`` of it.
    """
    del sphere
    goal = jnp.asarray(targets)[jnp.asarray(assignment)]  # [n, d]

    def u(x, t):
        del t
        return gain * (goal - x)

    return u


def consensus_control(target: Optional[jax.Array] = None, *, gain: float = 1.0) -> Control:
    """A feed-forward control driving every token towards one point: consensus.

    ``u(x_i, t) = gain * (target - x_i)``, ``target`` ``[d]`` (default the first basis vector
    ``e_1``; the dimension is read from ``x`` at call time), projected onto the tangent
    space by ``simulate`` when on the sphere. Returns ``u(x [n, d], t) -> [n, d]``.

    Why it works for any ``Q, K, V`` (``b = drift_bound(V)``, ``||V||_2`` for one head): the
    softmax weights are a probability vector, so ``|A_i| <= b`` on the sphere whatever ``Q``
    and ``K`` are. With ``c_i = <x_i, e>`` = ``cos(theta_i)`` and ``P_x(e - x) = e - c x``,

        dc_i/dt = <A_i, e - c_i x_i> + gain (1 - c_i^2)
               >= sin(theta_i) (gain sin(theta_i) - b),        since |e - c x| = sin(theta).

    So for ``gain > b``, with ``alpha = arcsin(b / gain)``, ``theta_i`` strictly decreases
    while ``alpha < theta_i < pi - alpha``; the cap ``theta <= alpha`` is forward invariant and
    attracting, and every token starting outside the small antipodal cap
    ``theta > pi - alpha`` (a generic start, for large gain) ends in it. Two tokens in the
    cap are at angle ``<= 2 alpha``, so the final **diameter <= 2 sin(alpha) = 2 b / gain**:
    consensus to any tolerance ``eps`` once ``gain > 2 b / eps``. The threshold is
    ``gain = b = ||V||_2``: below it the bound gives nothing (attention can hold tokens
    away from the target), above it the diameter bound ``2 b / gain`` falls like
    ``1 / gain``. In ``R^d`` (``sphere=False``) the same reasoning on ``R = max_i |x_i - e|``
    (with ``|x_j| <= 1 + R``) gives ``dR/dt <= b - (gain - b) R``: the same threshold
    ``gain > b``, and ``R -> b / (gain - b)``, a diameter of at most ``2 b / (gain - b)``.
    """

    def u(x, t):
        del t
        e = jnp.zeros(x.shape[-1], x.dtype).at[0].set(1.0) if target is None else target
        return gain * (e - x)

    return u


# ---------------------------------------------------------------------------------- measures


def _pairwise_distances(x: jax.Array) -> jax.Array:
    diff = x[..., :, None, :] - x[..., None, :, :]
    return jnp.sqrt(jnp.sum(diff * diff, axis=-1))


def diameter(x: jax.Array) -> jax.Array:
    """``max_{i,j} ||x_i - x_j||``: ``x`` ``[..., n, d]`` -> ``[...]``."""
    return jnp.max(_pairwise_distances(_tokens("x", x)), axis=(-2, -1))


def mean_cosine(x: jax.Array) -> jax.Array:
    """Mean cosine similarity over ordered pairs ``i != j``: ``[..., n, d]`` -> ``[...]``.

    Needs ``n >= 2``; 1 at consensus.
    """
    x = _tokens("x", x, min_tokens=2)
    n = x.shape[-2]
    u = x / jnp.linalg.norm(x, axis=-1, keepdims=True)
    gram = jnp.einsum("...id,...jd->...ij", u, u)
    trace = jnp.trace(gram, axis1=-2, axis2=-1)
    return (jnp.sum(gram, axis=(-2, -1)) - trace) / (n * (n - 1))


def n_clusters(x, tol: float) -> jax.Array:
    """Number of single-linkage clusters at ``tol``: ``[..., n, d]`` -> int32 ``[...]``.

    Tokens are linked when ``||x_i - x_j|| <= tol``; clusters are the connected components
    of the links. Jittable: the components come from the transitive closure of the link
    matrix by repeated squaring (``k = (n - 1).bit_length()`` squarings reach every path, of
    length up to ``2^k >= n - 1``), and a component of size ``m`` contributes ``m`` rows of
    row-sum ``m``, so the count is ``sum_i 1 / rowsum_i``.
    """
    x = _tokens("x", x)
    n = x.shape[-2]
    linked = (_pairwise_distances(x) <= tol).astype(jnp.float32)  # reflexive: d(x_i, x_i) = 0
    for _ in range((n - 1).bit_length()):  # after k squarings: every path of length <= 2^k
        linked = (linked @ linked > 0).astype(jnp.float32)
    return jnp.round(jnp.sum(1.0 / jnp.sum(linked, axis=-1), axis=-1)).astype(jnp.int32)


def distance_to(x: jax.Array, targets: jax.Array) -> jax.Array:
    """``max_i ||x_i - target_i||``: ``x`` ``[..., n, d]``, ``targets`` ``[n, d]`` or ``[d]``.

    Returns ``[...]`` (one value per configuration, e.g. ``[steps + 1]`` on a trajectory).
    """
    x, targets = _tokens("x", x), _real("targets", targets)
    if targets.shape not in (x.shape[-2:], x.shape[-1:]):
        raise ValueError(f"targets must have shape [n, d] = {x.shape[-2:]} or [d] = {x.shape[-1:]} (as x), got shape {targets.shape}")
    return jnp.max(jnp.linalg.norm(x - targets, axis=-1), axis=-1)
