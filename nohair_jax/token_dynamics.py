"""Token dynamics in bulk: many random particle systems at once (a transformer's tokens by layer:
``nohair_jax.layer_measures``).

docs/definitions.md#token-dynamics; the system, its controls and its measures are ``nohair_jax.dynamics``.

**Ensembles.** ``random_systems`` draws ``(x0, Q, K, V)``; ``simulate_systems`` integrates every
draw at one control gain in one compiled program (jit; ``lax.map`` over batches of vmapped
draws, so memory stays bounded) and returns per-step measures; ``summarise`` reads off the
fraction that reached a tolerance, when, and whether the theory's bound held; ``gain_sweep``
does all of it over a list of gains and saves and draws the result (``nohair dynamics``).

Units. A draw's drift bound ``b = drift_bound(V)`` sets its time scale. With ``s = b t`` the
controlled system ``dx/dt = P_x(A(x; Q, K, V) + g (goal - x))`` becomes exactly
``dx/ds = P_x(A(x; Q, K, V / b) + r (goal - x))`` with ``r = g / b`` (``A`` is linear in ``V``).
So every draw is simulated as ``(Q, K, V / b)`` with the **gain ratio** ``r`` and time ``s``
in units of ``1 / b``: the theory's threshold is ``r = 1`` and its consensus bound
``diameter <= 2 / r`` for every draw alike (``dynamics.consensus_control``).

**Figures** shared by the experiments and the command line, drawn from saved files:
``plot_quantiles`` and ``measures_figure`` (measures against time over draws),
``threshold_figure`` (final measures against gain), ``draw_sweep`` (both, for a ``gain_sweep``).
"""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp
import matplotlib
import numpy as np
import optax
from jax import lax
from matplotlib.figure import Figure
from tqdm.auto import tqdm

from nohair_jax.checks import check_int, check_settings
from nohair_jax.dynamics import cluster_control, diameter, distance_to, drift_bound, mean_cosine, n_clusters, simulate
from nohair_jax.results import load_json, save_figure, save_json, save_npz, written_together

QUANTILES = (0.1, 0.5, 0.9)


# ------------------------------------------------------------------------------------ ensembles


class Systems(NamedTuple):
    """A batch of draws: ``x0`` ``[draws, n, d]`` unit rows; ``Q, K, V`` ``[draws, d, d]``
    (one head) or ``[draws, heads, d, d]``."""

    x0: jax.Array
    Q: jax.Array
    K: jax.Array
    V: jax.Array


class Runs(NamedTuple):
    """What ``simulate_systems`` returns (numpy), ``S = steps``, ``R = len(record)``:

    t ``[S + 1]`` times in units of ``1 / drift_bound(V)``; diameter, mean_cosine, distance
    (``max_i |x_i - goal_i|``) ``[draws, S + 1]`` at every step; record ``[R]`` the recorded
    step indices; clusters ``[draws, R]`` (``n_clusters`` at ``tol``) and states
    ``[draws, R, n, d]`` at the recorded steps.
    """

    t: np.ndarray
    diameter: np.ndarray
    mean_cosine: np.ndarray
    distance: np.ndarray
    record: np.ndarray
    clusters: np.ndarray
    states: np.ndarray


def random_systems(seed: int, draws: int, n: int, d: int, *, heads: int = 1, beta: float = 1.0) -> Systems:
    """``x0`` uniform on the sphere ``S^(d-1)``; every entry of ``Q, K, V`` iid ``N(0, 1)``, then ``Q``
    times ``beta``: the attention's inverse temperature (the logits ``<Q x_i, K x_j>`` scale with it)."""
    kx, kq, kk, kv = jax.random.split(jax.random.PRNGKey(seed), 4)
    x0 = jax.random.normal(kx, (draws, n, d))
    shape = (draws, d, d) if heads == 1 else (draws, heads, d, d)
    q, k, v = (jax.random.normal(key, shape) for key in (kq, kk, kv))
    return Systems(x0 / jnp.linalg.norm(x0, axis=-1, keepdims=True), beta * q, k, v)


def cluster_goals(n: int, d: int, k: int) -> jax.Array:
    """``[n, d]``: token ``i``'s target ``e_(i mod k)`` (basis vectors, ``k <= d``).

    ``k = 1`` is consensus at ``e_1``, ``consensus_control``'s default target.
    """
    if not 1 <= k <= d:
        raise ValueError(f"the number of clusters must be in [1, d = {d}], got {k}")
    return jnp.eye(d)[jnp.arange(n) % k]


def record_steps(steps: int, count: int) -> tuple[int, ...]:
    """Step 0 and about ``count`` geometrically spaced steps up to ``steps``.

    Geometric because the dynamics are multi-scale: a controlled run settles by ``s ~ 1 / r``,
    attention alone over ``s ~ 10``.
    """
    return tuple(sorted({0, *np.round(np.geomspace(1, steps, count)).astype(int).tolist()}))


@functools.partial(jax.jit, static_argnames=("steps", "record", "batch_size"))
def _simulate(systems: Systems, goal, gain, dt, tol, *, steps: int, record: tuple[int, ...], batch_size: int):
    def one(draw: Systems):
        # token i steered to goal[i]: cluster_control with the identity assignment
        control = cluster_control(goal, jnp.arange(goal.shape[0]), gain=gain)
        traj = simulate(draw.x0, draw.Q, draw.K, draw.V / drift_bound(draw.V), control=control, dt=dt, steps=steps)
        kept = traj[jnp.asarray(record)]
        return diameter(traj), mean_cosine(traj), distance_to(traj, goal), n_clusters(kept, tol), kept

    return lax.map(one, systems, batch_size=batch_size)


def simulate_systems(systems: Systems, goal: jax.Array, gain_ratio: float, *, dt: float, steps: int, tol: float,
                     record: tuple[int, ...], batch_size: int = 32) -> Runs:
    """Integrate every draw with the control ``u = r (goal - x)`` (RK4 on the sphere).

    Args:
      systems: the draws. goal: ``[n, d]`` each token's target (``cluster_goals``).
      gain_ratio: ``r = gain / drift_bound(V)``, ``0`` for attention alone (the control adds 0).
      dt, steps: step in units of ``1 / drift_bound(V)`` and number of steps (see module doc).
      tol: the single-linkage tolerance of ``n_clusters``. record: sorted steps to keep states
        at, starting with 0 (``summarise`` reads the initial tokens from it).
      batch_size: at most this many draws vmapped together; batches run one after another
        (bounded memory). The largest divisor of ``draws`` up to it is used: a remainder batch
        would compile the simulation a second time.
    """
    if not record or record[0] != 0:
        raise ValueError(f"record must start with step 0, got {record[:3]}")
    draws = systems.x0.shape[0]
    batch_size = max(b for b in range(1, min(batch_size, draws) + 1) if draws % b == 0)
    out = _simulate(systems, goal, gain_ratio, dt, tol, steps=steps, record=record, batch_size=batch_size)
    diam, cos, dist, clusters, states = map(np.asarray, out)
    return Runs(np.arange(steps + 1) * dt, diam, cos, dist, np.asarray(record), clusters, states)


@functools.partial(jax.jit, static_argnames=("steps", "iterations"))
def _ascend(systems: Systems, goal, gain, dt, learning_rate, *, steps: int, iterations: int):
    def trajectory(params, x0):
        q, k, v = params
        control = cluster_control(goal, jnp.arange(goal.shape[0]), gain=gain)
        return simulate(x0, q, k, v / drift_bound(v), control=control, dt=dt, steps=steps)

    def objective(params, x0):
        # The time-averaged log of the squared diameter: finite gradients where the tokens have
        # met (the diameter itself has none at 0), and a signal from the whole trajectory.
        x = trajectory(params, x0)
        squared = jnp.max(jnp.sum((x[:, :, None] - x[:, None]) ** 2, axis=-1), axis=(-2, -1))
        return jnp.mean(jnp.log(1e-30 + squared))

    final = jax.vmap(lambda params, x0: diameter(trajectory(params, x0)[-1]))
    ascent = jax.vmap(jax.grad(objective))
    optimiser = optax.adam(learning_rate)
    params = (systems.Q, systems.K, systems.V)

    def step(carry, _):
        params, state, worst = carry
        worst = jnp.maximum(worst, final(params, systems.x0))
        grads = jax.tree_util.tree_map(jnp.negative, ascent(params, systems.x0))  # optax descends
        updates, state = optimiser.update(grads, state, params)
        return (optax.apply_updates(params, updates), state, worst), None

    start = (params, optimiser.init(params), jnp.zeros(systems.x0.shape[0], systems.x0.dtype))
    (params, _, worst), _ = lax.scan(step, start, None, length=iterations)
    return jnp.maximum(worst, final(params, systems.x0))


def adversarial_diameters(systems: Systems, gain_ratio: float, *, dt: float, steps: int, iterations: int = 30,
                          learning_rate: float = 0.1) -> np.ndarray:
    """The worst final diameter found per draw by gradient ascent on ``(Q, K, V)`` under the
    consensus control ``u = r (e_1 - x)``: ``[draws]`` (units as ``simulate_systems``).

    Each draw's ``(Q, K, V)`` (starting from ``systems``; the tokens ``x0`` stay fixed) is moved by
    Adam, ``iterations`` steps of ``learning_rate``, up the gradient of its trajectory's
    time-averaged log squared diameter, differentiated through the RK4 integrator
    (``jax.grad`` through ``lax.scan``); the largest final diameter seen along the way is returned.
    ``V`` enters divided by its drift bound, so the search is over attention patterns at a fixed
    ``||V||``: the gain ratio means the same for every candidate.
    """
    goal = cluster_goals(systems.x0.shape[1], systems.x0.shape[2], 1)
    return np.asarray(_ascend(systems, goal, gain_ratio, dt, learning_rate, steps=steps, iterations=iterations))


def first_time_below(series: np.ndarray, t: np.ndarray, eps: float) -> np.ndarray:
    """First time ``t`` at which ``series < eps``: ``[..., S + 1]`` -> ``[...]``, nan where never."""
    below = series < eps
    return np.where(below.any(axis=-1), t[np.argmax(below, axis=-1)], np.nan)


def _quantiles(values: np.ndarray) -> dict | None:
    if values.size == 0:
        return None
    q = np.quantile(values, QUANTILES)
    return dict(q10=q[0], median=q[1], q90=q[2], max=values.max())


def theory_bound(gain_ratio: float, k: int) -> float | None:
    """The theory's final bound at gain ratio ``r > 1``, ``None`` at or below the threshold.

    Every token ends within angle ``alpha = arcsin(1 / r)`` of its target: for consensus
    (``k = 1``) the diameter is at most ``2 sin(alpha) = 2 / r``; for ``k`` targets the
    distance of a token to its own target at most the chord ``2 sin(alpha / 2)``. Both hold for
    tokens starting outside the antipodal cap (angle ``> pi - alpha`` from the target).
    """
    if gain_ratio <= 1:
        return None
    alpha = math.asin(1 / gain_ratio)
    return 2 / gain_ratio if k == 1 else 2 * math.sin(alpha / 2)


def summarise(runs: Runs, goal: jax.Array, *, gain_ratio: float, k: int, eps: float) -> dict:
    """One condition's numbers: did the measure get below ``eps``, when, and did the bound hold.

    The measure is the diameter for consensus (``k = 1``) and the largest distance of a token to
    its own target for ``k`` clusters. ``reached``: fraction of draws whose measure is below
    ``eps`` at the end; ``time_to_eps``: over those, the first time it was (units of
    ``1 / ||V||``); ``failed_draws``: the first 20 indices that did not reach it;
    ``final_clusters``: ``n_clusters`` at ``eps`` at the end; ``bound``: ``theory_bound``, the
    fraction of draws within it at the end, and how many draws had a token start in the
    antipodal cap, outside the theorem's hypothesis.
    """
    measure = runs.diameter if k == 1 else runs.distance
    final = measure[:, -1]
    reached = final < eps
    times = first_time_below(measure, runs.t, eps)[reached]
    clusters = runs.clusters[:, -1]
    bound = theory_bound(gain_ratio, k)
    bound_row = None
    if bound is not None:
        cos0 = np.sum(runs.states[:, 0] * np.asarray(goal), axis=-1)  # [draws, n]
        in_cap = np.any(cos0 < -math.cos(math.asin(1 / gain_ratio)), axis=-1)  # angle > pi - alpha
        bound_row = dict(value=bound, held=np.mean(final <= bound), draws_starting_in_antipodal_cap=int(in_cap.sum()))
    return dict(
        gain_ratio=gain_ratio, clusters_targeted=k, draws=len(final), eps=eps,
        measure="diameter" if k == 1 else "max distance to the assigned target",
        reached=np.mean(reached), failed_draws=np.flatnonzero(~reached)[:20].tolist(),
        time_to_eps=_quantiles(times), final=_quantiles(final),
        final_clusters=dict(median=np.median(clusters), fraction_equal_target=np.mean(clusters == k)),
        bound=bound_row,
    )


def quantile_series(runs: Runs) -> dict[str, np.ndarray]:
    """Quantiles over draws at the recorded steps: ``t`` ``[R]``; ``diameter``, ``mean_cosine``,
    ``distance``, ``clusters`` ``[3, R]`` (``QUANTILES``)."""
    at = runs.record
    per_draw = dict(diameter=runs.diameter[:, at], mean_cosine=runs.mean_cosine[:, at],
                    distance=runs.distance[:, at], clusters=runs.clusters)
    return dict(t=runs.t[at], **{name: np.quantile(v, QUANTILES, axis=0) for name, v in per_draw.items()})


def save_series(path, series: dict[str, dict[str, np.ndarray]]) -> Path:
    """``{condition: quantile_series(...)}`` -> one npz, keys ``<condition>__<name>``."""
    return save_npz(path, **{f"{key}__{name}": v for key, s in series.items() for name, v in s.items()})


def load_series(path) -> dict[str, dict[str, np.ndarray]]:
    """Inverse of ``save_series``."""
    series: dict[str, dict[str, np.ndarray]] = {}
    with np.load(path) as data:
        for full in data.files:
            key, name = full.rsplit("__", 1)
            series.setdefault(key, {})[name] = data[full]
    return series


def transition(rows: list[dict]) -> dict:
    """Where the measured transition sits on a gain grid (rows of ``summarise``, sorted by gain).

    ``median_below_eps``: the smallest grid gain at which the median final measure is below
    eps, and the grid gain before it (the crossing lies between); ``median_crossing``: the
    crossing interpolated linearly in (log gain, log measure); ``reached_50``, ``reached_90``,
    ``reached_all``: the smallest grid gain at which that fraction of draws reached eps (None
    where none did).
    """
    gains = [r["gain_ratio"] for r in rows]
    medians = [r["final"]["median"] for r in rows]
    eps = rows[0]["eps"]
    first = next((i for i, m in enumerate(medians) if m < eps), None)
    crossing = None
    if first is not None and first > 0 and gains[first - 1] > 0:
        (g0, g1), (m0, m1) = gains[first - 1 : first + 1], medians[first - 1 : first + 1]
        m1 = max(m1, 1e-300)  # a diameter can round to exactly 0
        frac = (math.log(m0) - math.log(eps)) / (math.log(m0) - math.log(m1))
        crossing = math.exp(math.log(g0) + frac * (math.log(g1) - math.log(g0)))
    smallest = lambda level: next((g for g, r in zip(gains, rows) if r["reached"] >= level), None)  # noqa: E731
    return dict(
        median_below_eps=None if first is None else gains[first],
        gain_before=None if not first else gains[first - 1],
        median_crossing=crossing,
        reached_50=smallest(0.5), reached_90=smallest(0.9), reached_all=smallest(1.0),
        theory_threshold=1.0, theory_guarantee=2 / eps,
    )


def gain_sweep(out_dir, *, gains, draws: int, n: int, d: int, heads: int = 1, steps: int, dt: float,
               eps: float = 0.1, seed: int = 0, records: int = 60, meta: dict | None = None,
               progress: bool = True) -> dict:
    """Consensus of ``draws`` random systems at every gain ratio in ``gains``; saved and drawn.

    All gains see the same draws (common random numbers, so the curve against gain is not
    noise between draws). Validates every value before any work. Writes into ``out_dir``:
    ``summary.json`` (settings, one ``summarise`` row per gain, ``transition``),
    ``series.npz`` (``quantile_series`` per gain, keys ``r<i>__<name>``), ``measures.png``
    (measures against time) and ``threshold.png`` (final measures against gain), drawn from them.
    Returns the summary.
    """
    gains = sorted(float(g) for g in gains)
    check_settings(draws=draws, n=n, d=d, heads=heads, steps=steps, dt=dt, eps=eps, gains=gains)
    if not gains:
        raise ValueError("give at least one gain")
    out_dir = Path(out_dir)
    systems = random_systems(seed, draws, n, d, heads=heads)
    goal = cluster_goals(n, d, 1)
    record = record_steps(steps, records)
    rows, series = [], {}
    for i, gain in enumerate(tqdm(gains, desc="gains", unit="gain", disable=not progress)):
        runs = simulate_systems(systems, goal, gain, dt=dt, steps=steps, tol=eps, record=record)
        rows.append(summarise(runs, goal, gain_ratio=gain, k=1, eps=eps))
        series[f"r{i}"] = quantile_series(runs)
    settings = dict(gains=gains, draws=draws, n=n, d=d, heads=heads, steps=steps, dt=dt, horizon=steps * dt,
                    eps=eps, seed=seed, units="gain in units of drift_bound(V), time in units of 1 / drift_bound(V)")
    summary = dict(settings=settings, meta=meta or {}, rows=rows, transition=transition(rows))
    with written_together():
        save_series(out_dir / "series.npz", series)
        save_json(out_dir / "summary.json", summary)
    draw_sweep(out_dir)
    return load_json(out_dir / "summary.json")


def sweep_table(summary: dict) -> str:
    """A plain-text table of a ``gain_sweep`` summary, one row per gain."""
    lines = [f"{'gain/||V||':>10}  {'reached':>7}  {'time to eps (median)':>20}  {'final diameter (median, max)':>29}  "
             f"{'bound 2/r held':>14}"]
    for r in summary["rows"]:
        time = "-" if r["time_to_eps"] is None else f"{r['time_to_eps']['median']:.3g}"
        final = f"{r['final']['median']:.2e}, {r['final']['max']:.2e}"
        held = "-" if r["bound"] is None else f"{r['bound']['held']:.0%}"
        lines.append(f"{r['gain_ratio']:>10g}  {r['reached']:>7.0%}  {time:>20}  {final:>29}  {held:>14}")
    tr, eps = summary["transition"], summary["settings"]["eps"]
    if tr["median_below_eps"] is None:
        lines.append(f"the median final diameter stays above eps = {eps} at every gain")
    elif tr["gain_before"] is None:
        lines.append(f"the median final diameter is below eps = {eps} from the smallest gain, {tr['median_below_eps']}")
    else:
        crossing = "" if tr["median_crossing"] is None else f", log-log interpolation {tr['median_crossing']:.3g}"
        lines.append(f"the median final diameter falls below eps = {eps} between gain ratios {tr['gain_before']} "
                     f"and {tr['median_below_eps']}{crossing}")
    every = "at no gain" if tr["reached_all"] is None else f"from gain ratio {tr['reached_all']}"
    lines.append(f"every draw below eps {every}; theory: threshold 1, eps guaranteed from {tr['theory_guarantee']:g}")
    return "\n".join(lines)


# -------------------------------------------------------------------------------------- figures

LABELS = dict(
    diameter="diameter  max |x_i - x_j|",
    mean_cosine="mean cosine  <x_i, x_j>",
    distance="max distance to assigned target",
    clusters="clusters (single linkage at eps)",
)


def plot_quantiles(ax, t: np.ndarray, q: np.ndarray, *, label: str, color, ls: str = "-", band: bool = True) -> None:
    """Median of ``q`` ``[3, R]`` (``QUANTILES``) against ``t`` ``[R]``, the 10-90 % band shaded;
    ``t = 0`` is left out (time axes are logarithmic)."""
    keep = t > 0
    ax.plot(t[keep], q[1, keep], ls, color=color, label=label)
    if band:
        ax.fill_between(t[keep], q[0, keep], q[2, keep], color=color, alpha=0.15, lw=0)


def measures_figure(series: dict[str, dict[str, np.ndarray]], labels: dict[str, str], colors: dict[str, tuple],
                    *, names=("diameter", "mean_cosine", "clusters"), title: str = "") -> Figure:
    """One panel per measure in ``names`` against time; one curve (median and band) per condition
    of ``series`` (``quantile_series`` by key), with ``labels`` and ``colors`` by key; the 10-90 %
    bands only for up to four conditions, beyond which they hide each other."""
    fig = Figure(figsize=(5 * len(names), 4))
    axes = fig.subplots(1, len(names), squeeze=False)[0]
    for key, s in series.items():
        for ax, name in zip(axes, names):
            plot_quantiles(ax, s["t"], s[name], label=labels[key], color=colors[key], band=len(series) <= 4)
    for ax, name in zip(axes, names):
        ax.set_xscale("log")
        ax.set(xlabel="time (units of 1 / ||V||)", ylabel=LABELS[name])
        if name in ("diameter", "distance"):
            ax.set_yscale("log")
    axes[0].legend(fontsize=7)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def threshold_figure(summary: dict) -> Figure:
    """Final measures against the gain ratio (a ``gain_sweep`` summary): median diameter with its
    10-90 % band, the theory's bound ``2 / r``, eps, the threshold ``r = 1``; fraction reached;
    final clusters. Gain 0 (no control) is drawn as a horizontal line."""
    rows, s, tr = summary["rows"], summary["settings"], summary["transition"]
    ctrl = [r for r in rows if r["gain_ratio"] > 0]
    free = next((r for r in rows if r["gain_ratio"] == 0), None)
    g = np.array([r["gain_ratio"] for r in ctrl])
    fig = Figure(figsize=(15, 4.2))
    ax_d, ax_f, ax_c = fig.subplots(1, 3)
    final = np.array([[r["final"][k] for k in ("q10", "median", "q90")] for r in ctrl]).reshape(-1, 3)
    ax_d.loglog(g, final[:, 1], "o-", color="C0", label="median over draws")
    ax_d.fill_between(g, final[:, 0], final[:, 2], color="C0", alpha=0.2, lw=0, label="10-90 %")
    ax_d.loglog(g, [r["final"]["max"] for r in ctrl], "v:", color="C0", ms=4, label="worst draw")
    above = g[g > 1]
    if above.size:
        ax_d.loglog(above, 2 / above, "k--", label="theory bound 2 / r (r > 1)")
    ax_d.axhline(s["eps"], color="C3", lw=1, label=f"eps = {s['eps']}")
    for ax in (ax_d, ax_f, ax_c):
        ax.axvline(1, color="grey", lw=1, ls="-.", label="theory threshold r = 1" if ax is ax_d else None)
        if tr["median_crossing"] or tr["median_below_eps"]:
            ax.axvline(tr["median_crossing"] or tr["median_below_eps"], color="C3", lw=1, ls=":",
                       label="measured: median crosses eps" if ax is ax_d else None)
        ax.set_xscale("log")
        ax.set_xlabel("gain / ||V||")
    if free is not None:
        ax_d.axhline(free["final"]["median"], color="C1", ls="--", label="no control, median")
        ax_f.axhline(free["reached"], color="C1", ls="--", label="no control")
        ax_c.axhline(free["final_clusters"]["median"], color="C1", ls="--", label="no control")
    ax_d.set(ylabel="final diameter", title=f"after time {s['horizon']:g} / ||V||")
    ax_d.legend(fontsize=7)
    ax_f.plot(g, [r["reached"] for r in ctrl], "o-")
    ax_f.set(ylabel=f"fraction with final diameter < {s['eps']}", ylim=(-0.02, 1.02))
    if free is not None:  # its only labelled line
        ax_f.legend(fontsize=7)
    ax_c.plot(g, [r["final_clusters"]["median"] for r in ctrl], "o-")
    ax_c.set(ylabel="final clusters at eps (median)")
    fig.suptitle(f"{s['draws']} random (Q, K, V), n = {s['n']} tokens on S^{s['d'] - 1}, {s['heads']} head(s)")
    fig.tight_layout()
    return fig


def draw_sweep(out_dir) -> None:
    """``measures.png`` and ``threshold.png`` of a ``gain_sweep`` folder, from its saved files."""
    out_dir = Path(out_dir)
    summary = load_json(out_dir / "summary.json")
    rows = summary["rows"]
    labels = {f"r{i}": f"gain {r['gain_ratio']:g} ||V||" for i, r in enumerate(rows)}
    colors = {f"r{i}": matplotlib.colormaps["viridis"](i / max(1, len(rows) - 1)) for i in range(len(rows))}
    fig = measures_figure(load_series(out_dir / "series.npz"), labels, colors,
                          title=f"{summary['settings']['draws']} random draws: median and 10-90 % over draws")
    save_figure(out_dir / "measures.png", fig)
    save_figure(out_dir / "threshold.png", threshold_figure(summary))
