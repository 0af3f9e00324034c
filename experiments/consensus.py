"""A feed-forward control steers tokens to consensus whatever Q, K, V are (second paper).

Hundreds of random systems (tokens uniform on the sphere S^(d-1), every entry of Q, K, V iid
N(0, 1)) are integrated with and without the control ``u(x) = r ||V|| (e_1 - x)``, each draw in
its own units (time in 1 / ||V||, gain ratio r; nohair_jax.token_dynamics), all draws of a
condition in one compiled program. Conditions: consensus with 1, 2, 4 heads (multi-head drift =
mean over heads, ||V|| = mean of the heads' norms), and k = 2, 3 clusters (token i steered to
e_(i mod k)). The gain ratio is set where the theory guarantees eps: 2 / r < eps.

    python experiments/consensus.py --out results/consensus            # quick: 256 draws, n 16, d 3
    python experiments/consensus.py --profile full --out results/consensus

Writes ``summary.json`` (one row per condition: fraction reaching eps, time to eps, final
measure, the theory's bound), ``series.npz`` (quantiles over draws against time),
``trajectories.npz`` (one draw, the first heads setting, with and without control, at the
recorded times),
and ``measures.png`` and
``trajectories.png`` drawn from them.
"""

from __future__ import annotations

from pathlib import Path
from typing import NotRequired, TypedDict

import numpy as np
from matplotlib.figure import Figure

from nohair_jax import criteria
from nohair_jax import dynamics as dyn
from nohair_jax import token_dynamics as td
from nohair_jax.parts import Part
from nohair_jax.claims import CHECK, NOT_MEASURED, Claim
from nohair_jax.experiments import control_threshold, experiment_parser, parse_experiment_args, write_summary
from nohair_jax.results import load_json, save_figure, save_npz

PROFILES = {
    "smoke": dict(draws=16, n=6, d=3, steps=200, dt=0.05, gain=20.0, heads=(2,), clusters=(2,), eps=0.1, records=20),
    "quick": dict(draws=256, n=16, d=3, steps=2000, dt=0.01, gain=40.0, heads=(1, 2, 4), clusters=(2, 3), eps=0.1,
                  records=150),
    "full": dict(draws=2048, n=32, d=3, steps=4000, dt=0.01, gain=40.0, heads=(1, 2, 4, 8), clusters=(2, 3), eps=0.1,
                 records=200),
}

PART = Part(order=11, title="Token dynamics: consensus and clusters under a feed-forward control",
            figures=("trajectories.png", "measures.png"),
            about="Self-attention as interacting particles on the sphere, many random (Q, K, V) draws, with and "
                  "without the control.",
            quick=("quick", dict(draws=64)),
            # the full profile: the sizes the quick one had before the main job was cut to 15 minutes
            full=("quick", dict(draws=128)), seconds=40)


def conditions(p: dict) -> list[dict]:
    """Every (heads, clusters, gain) simulated: each with and without the control."""
    cases = [dict(heads=h, k=1) for h in p["heads"]] + [dict(heads=p["heads"][0], k=k) for k in p["clusters"]]
    return [dict(case, gain=gain, key=f"h{case['heads']}_k{case['k']}_{'control' if gain else 'free'}")
            for case in cases for gain in (0.0, p["gain"])]


class Final(TypedDict):
    max: float


class ControlRow(TypedDict):
    """One condition (``token_dynamics.summarise``): heads, clusters targeted, the control gain (0: free),
    the fraction of draws reaching eps, and the final measure's quantiles over draws."""

    heads: int
    clusters_targeted: int
    gain_ratio: float
    draws: int
    measure: str
    reached: float
    final: Final


class Settings(TypedDict):
    eps: float


class Summary(TypedDict):
    """What ``run`` saves in summary.json and the claims read (``claims.check_summary``)."""

    settings: Settings
    rows: list[ControlRow]
    profile: NotRequired[str]
    example_draw: NotRequired[int]
    units: NotRequired[str]


def run(profile: str, out: Path, seed: int = 0, settings: dict | None = None) -> Summary:
    """Run the profile (``settings`` override its values), save, draw; returns the summary."""
    p, out = dict(PROFILES[profile], **(settings or {})), Path(out)
    td.check_settings(draws=p["draws"], n=p["n"], d=p["d"], heads=max(p["heads"]), steps=p["steps"], dt=p["dt"],
                      eps=p["eps"], gains=[p["gain"]])
    record = td.record_steps(p["steps"], p["records"])
    systems = {h: td.random_systems(seed, p["draws"], p["n"], p["d"], heads=h) for h in p["heads"]}
    rows, series, paths = [], {}, {}
    for c in conditions(p):
        goal = td.cluster_goals(p["n"], p["d"], c["k"])
        runs = td.simulate_systems(systems[c["heads"]], goal, c["gain"], dt=p["dt"], steps=p["steps"], tol=p["eps"],
                                   record=record)
        rows.append(dict(key=c["key"], heads=c["heads"], **td.summarise(runs, goal, gain_ratio=c["gain"], k=c["k"],
                                                                          eps=p["eps"])))
        series[c["key"]] = td.quantile_series(runs)
        if c["heads"] == p["heads"][0] and c["k"] == 1:  # the example draw: the first heads setting
            paths[c["key"].rsplit("_", 1)[1]] = runs
        print(f"{c['key']}: reached {rows[-1]['reached']:.0%}", flush=True)
    example = example_draw(paths["free"].diameter[:, -1], paths["control"].diameter[:, -1], p["eps"])
    save_npz(out / "trajectories.npz", t=paths["free"].t[paths["free"].record],
             **{name: runs.states[example] for name, runs in paths.items()})
    td.save_series(out / "series.npz", series)
    summary = dict(profile=profile, settings=dict(p, seed=seed), example_draw=example, rows=rows,
                   units="gain in units of ||V||_2, time in units of 1 / ||V||_2")
    return write_summary(out, summary, draw)


def example_draw(free: np.ndarray, control: np.ndarray, eps: float) -> int:
    """The first draw that attention alone leaves apart and the control brings together (else 0)."""
    shown = np.flatnonzero((free >= eps) & (control < eps))
    return int(shown[0]) if shown.size else 0


def draw(out: Path) -> None:
    summary = load_json(out / "summary.json")
    p = summary["settings"]
    series = td.load_series(out / "series.npz")
    fig = Figure(figsize=(15, 8))
    axes = fig.subplots(2, 3)
    rows = {r["key"]: r for r in summary["rows"]}
    for key, s in series.items():
        r = rows[key]
        consensus = r["clusters_targeted"] == 1
        row = axes[0] if consensus else axes[1]
        color = f"C{(r['heads'] if consensus else r['clusters_targeted'] + 4) % 10}"
        what = f"{r['heads']} head(s)" if consensus else f"{r['clusters_targeted']} clusters"
        control = f"control r = {r['gain_ratio']:g}" if r["gain_ratio"] else "no control"
        label = f"{what}, {control}: {r['reached']:.0%} reach"
        names = ("diameter", "mean_cosine", "clusters") if consensus else ("distance", "mean_cosine", "clusters")
        for ax, name in zip(row, names):
            td.plot_quantiles(ax, s["t"], s[name], label=label, color=color, ls="-" if r["gain_ratio"] else "--")
            ax.set(xscale="log", xlabel="time (units of 1 / ||V||)", ylabel=td.LABELS[name])
    for ax in (axes[0, 0], axes[1, 0]):
        ax.set_yscale("log")
        ax.axhline(p["eps"], color="grey", lw=0.8)
        ax.legend(fontsize=7)
    axes[0, 1].set_title("consensus: target e_1")
    axes[1, 1].set_title("clusters: token i to e_(i mod k)")
    fig.suptitle(f"{p['draws']} random (Q, K, V), n = {p['n']} tokens on S^{p['d'] - 1}; "
                 f"median and 10-90 % over draws; eps = {p['eps']} grey")
    fig.tight_layout()
    save_figure(out / "measures.png", fig)
    save_figure(out / "trajectories.png", trajectories_figure(out / "trajectories.npz", summary))


def trajectories_figure(path: Path, summary: dict) -> Figure:
    """Token paths of the example draw on the sphere (first three coordinates), without and with control."""
    data = np.load(path)
    p = summary["settings"]
    fig = Figure(figsize=(11, 5.2))
    u, v = np.meshgrid(np.linspace(0, 2 * np.pi, 25), np.linspace(0, np.pi, 13))
    for j, name in enumerate(("free", "control")):
        ax = fig.add_subplot(1, 2, j + 1, projection="3d")
        ax.plot_wireframe(np.cos(u) * np.sin(v), np.sin(u) * np.sin(v), np.cos(v), color="grey", lw=0.3, alpha=0.4)
        paths = data[name]  # [F, n, d]
        for token in range(paths.shape[1]):
            color = f"C{token % 10}"
            ax.plot(*great_circle_path(paths[:, token, :3]).T, color=color, lw=1)
            ax.scatter(*paths[0, token, :3], color=color, s=12, marker="o")
            ax.scatter(*paths[-1, token, :3], color="k", s=18, marker="x")
        diam = float(dyn.diameter(paths[-1]))
        title = "attention alone" if name == "free" else f"with control, gain {p['gain']:g} ||V|| towards e_1"
        ax.set_title(f"{title}\nfinal diameter {diam:.2g} at t = {data['t'][-1]:g}", fontsize=9)
        ax.set_box_aspect((1, 1, 1))
        ax.set_axis_off()
    fig.suptitle(f"draw {summary['example_draw']}: o start, x end; recorded states joined by great-circle arcs")
    return fig


def great_circle_path(points: np.ndarray, per: int = 8) -> np.ndarray:
    """Unit points ``[F, 3]`` joined by great-circle arcs of ``per`` segments: ``[(F - 1) per + 1, 3]``.

    Recorded states are sparse where a token moves fast (a step of the controlled run moves a
    token by a third of the way); arcs keep the drawn path on the sphere instead of cutting chords.
    """
    a, b = points[:-1], points[1:]
    omega = np.arccos(np.clip(np.sum(a * b, axis=-1), -1.0, 1.0))[:, None, None]  # [F - 1, 1, 1]
    s = np.linspace(0.0, 1.0, per, endpoint=False)[None, :, None]
    # slerp; sin(s w) / sin(w) -> s as w -> 0
    weight = lambda u: np.where(omega > 1e-6, np.sin(u * omega) / np.maximum(np.sin(omega), 1e-12), u)  # noqa: E731
    arcs = weight(1 - s) * a[:, None] + weight(s) * b[:, None]  # [F - 1, per, 3]
    return np.concatenate([arcs.reshape(-1, 3), points[-1:]])


# ---------------------------------------------------------------- the claims this part measures


def _consensus_rows(summary: Summary, clusters: int) -> list[ControlRow]:
    return [r for r in summary["rows"] if r["clusters_targeted"] == clusters]


def _controlled(rows: list[ControlRow], what: str):
    """The verdict for 'the control reaches the target in every draw', with the free system beside it."""
    control = [r for r in rows if r["gain_ratio"] > 0]
    free = [r for r in rows if r["gain_ratio"] == 0]
    if not control:
        return criteria.unmeasured(f"no controlled {what} run at this profile")
    draws = control[0]["draws"]
    text = (f"{what}: reached by {min(r['reached'] for r in control):.0%} of {draws} random (Q, K, V) draws with the control "
            f"(gain {control[0]['gain_ratio']:g} ||V||), {max((r['reached'] for r in free), default=0):.0%} without; "
            f"largest final {control[0]['measure']} {max(r['final']['max'] for r in control):.2g}")
    return criteria.judged(text, None, all(r["reached"] == 1.0 for r in control),
                           reached_with_control=[r["reached"] for r in control], reached_without=[r["reached"] for r in free],
                           gain_ratio=control[0]["gain_ratio"], draws=draws)


def _consensus(summary: Summary, threshold: control_threshold.Summary):
    eps = summary["settings"]["eps"]
    judged = _controlled(_consensus_rows(summary, 1), f"consensus (diameter < {eps})")
    if judged.verdict == NOT_MEASURED:
        return judged
    guarantee = 2 / eps
    worst = control_threshold.adversarial_at(threshold, guarantee)
    if not worst:
        return criteria.unmeasured(judged.measured + f"; the adversary did not search gain {guarantee:g} ||V||", **judged.evidence)
    ok = judged.verdict == "agree" and all(r["reached"] == 1.0 for r in worst)
    shapes = ", ".join(f"n {r['n']}, d {r['d']}" for r in worst)
    text = (judged.measured + f"; adversarial (Q, K, V) at {guarantee:g} ||V||, the theory's gain for eps: worst final "
            f"diameter {max(r['worst'] for r in worst):.2g} ({shapes})")
    return criteria.judged(text, None, ok, **judged.evidence, adversarial_worst=[r["worst"] for r in worst])


def _clusters(summary: Summary):
    rows = [r for r in summary["rows"] if r["clusters_targeted"] > 1]
    ks = sorted({r["clusters_targeted"] for r in rows})
    return _controlled(rows, f"{ks} chosen clusters")


def _multihead(summary: Summary):
    rows = [r for r in _consensus_rows(summary, 1) if r["heads"] > 1]
    heads = sorted({r["heads"] for r in rows})
    return _controlled(rows, f"consensus with {heads} heads")


CLAIMS = (
    Claim("ff_consensus", "A feed-forward control steers the tokens arbitrarily close to consensus whatever Q, K, V are",
          "every (Q, K, V)", (), "A theorem of the second paper; its simulation at the gain from which the proof "
          "guarantees eps is the check ff_consensus_check. No measurement of a model can contradict it.",
          criteria.proved("ff_consensus_check", "a theorem, simulated where the proof guarantees it")),
    Claim("ff_consensus_check", "Consensus under the control at the gains the proof covers (random and adversarial "
          "(Q, K, V))", "every (Q, K, V)", ("consensus", "control_threshold"),
          "Tokens on the sphere under the consensus control: random (Q, K, V) draws at the profile's gain, and (Q, K, V) "
          "found by gradient ascent on the diameter through the simulation (worst cases) at the gain 2 / eps ||V|| from "
          "which the theory guarantees eps. Agree if every random and every adversarial draw ends with a diameter below "
          "eps; fail if any does not.", _consensus, CHECK),
    Claim("ff_clusters", "The control result extends to convergence to several clusters", "every (Q, K, V)", (),
          "A theorem; simulated as the check ff_clusters_check.", criteria.proved("ff_clusters_check", "a theorem")),
    Claim("ff_clusters_check", "The cluster control reaches its targets (random (Q, K, V), gain 40 ||V||)",
          "every (Q, K, V)", ("consensus",),
          "As consensus (random draws only), with a control towards k chosen targets; the control knows "
          "each token's index, which assigns its target (side information a feed-forward layer has only through "
          "positions). Agree if every controlled draw ends within eps of its assigned target; disagree otherwise.",
          _clusters, CHECK),
    Claim("ff_multihead", "The control result extends to multi-head attention", "every (Q, K, V)", (),
          "A theorem; simulated as the check ff_multihead_check.", criteria.proved("ff_multihead_check", "a theorem")),
    Claim("ff_multihead_check", "The control reaches consensus with several heads (random (Q, K, V), gain 40 ||V||)",
          "every (Q, K, V)", ("consensus",),
          "As consensus (random draws only), with several attention heads. Agree if every controlled draw reaches "
          "consensus; fail otherwise.", _multihead, CHECK),
)


def main() -> None:
    args = parse_experiment_args(experiment_parser(__doc__, "consensus", PROFILES))
    summary = run(args.profile, args.out, args.seed)
    print(f"{'condition':<20} {'reached':>7}  {'time to eps: median [10 %, 90 %]':>34}  "
          f"{'final: median, max':>20}  bound held")
    for r in summary["rows"]:
        t = r["time_to_eps"]
        times = "-" if t is None else f"{t['median']:.3g} [{t['q10']:.3g}, {t['q90']:.3g}]"
        held = "-" if r["bound"] is None else f"{r['bound']['held']:.0%} of draws (bound {r['bound']['value']:.3g})"
        final = f"{r['final']['median']:.2e}, {r['final']['max']:.2e}"
        print(f"{r['key']:<20} {r['reached']:>7.0%}  {times:>34}  {final:>20}  {held}")


if __name__ == "__main__":
    main()
