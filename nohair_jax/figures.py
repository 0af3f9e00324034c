"""Figures, drawn from saved result files (never from state that only lived in memory).

Uses matplotlib's object API (``Figure``), so no backend or display is needed.
"""

from __future__ import annotations

import textwrap

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

from nohair_jax.fit import FitRefused, PowerLawFit, alpha_vs_window, local_exponent, summary_curve

MOST_LAYERS_DRAWN = 8


def drawn_layers(n_layers: int, most: int = MOST_LAYERS_DRAWN) -> list[int]:
    """The layers 1..L a per-layer figure draws: all of them up to ``most``, else ``most`` spread
    evenly over depth, the first and the last included."""
    if n_layers <= most:
        return list(range(1, n_layers + 1))
    return sorted({int(round(x)) for x in np.linspace(1, n_layers, most)})


def layer_colors(n_layers: int) -> dict[int, tuple]:
    """layer -> colour: matplotlib's cycle for a few layers, a viridis scale over depth for many."""
    if n_layers <= MOST_LAYERS_DRAWN:
        return {layer: f"C{(layer - 1) % 10}" for layer in range(1, n_layers + 1)}
    from matplotlib import colormaps

    return {layer: colormaps["viridis"]((layer - 1) / (n_layers - 1)) for layer in range(1, n_layers + 1)}


def offsets_figure(t: np.ndarray, l2: np.ndarray, fits: list[PowerLawFit | FitRefused], floor: np.ndarray | None, *,
                   kl: np.ndarray | None = None, kl_t: np.ndarray | None = None, half_life: dict | None = None,
                   title: str = "") -> Figure:
    """Panels for one model: offsets per layer, local exponent per layer, alpha against window, and
    (with ``kl``) the next-token KL with its half-life marked.

    Args:
      t: [T] continuation positions 1..T.
      l2: [n_pairs, L+1, T] offsets; layer 0 (identically zero) is not drawn.
      fits: one ``PowerLawFit`` or ``FitRefused`` per layer 1..L; a fit's caveat (a sliding window crossed)
        is in its legend entry.
      floor: [L+1, T] measured noise floor, or None when it was not measured.
      kl: [n_pairs, K] next-token KL (nats) at positions ``kl_t`` [K] (None: every t).
      half_life: ``HalfLife.to_dict()`` of ``kl``, its half-life and threshold crossing drawn.
    """
    n_layers = l2.shape[1] - 1
    colors = layer_colors(n_layers)
    fig = Figure(figsize=(15 if kl is None else 20, 4.6))
    ax_off, ax_loc, ax_win, *ax_kl = fig.subplots(1, 3 if kl is None else 4)

    for layer in drawn_layers(n_layers):
        fit, color = fits[layer - 1], colors[layer]
        curve = summary_curve(l2[:, layer])
        positive = (l2[:, layer] > 0).all(axis=0)  # logs need every pair above zero
        label = f"layer {layer}"
        fitted = isinstance(fit, PowerLawFit)
        if fitted:
            label += f": alpha {fit.brief()}"
            label = textwrap.fill(label, 60, subsequent_indent="  ")  # a caveat in brief is a sentence
            tt = np.geomspace(*fit.t_range, 50)
            ax_off.plot(tt, fit.prefactor * tt ** -fit.alpha, "k--", lw=1)
        ax_off.loglog(t[positive], curve[positive], color=color, label=label)
        if floor is not None and np.any(floor[layer] > 0):
            ax_off.loglog(t, floor[layer], color=color, ls=":", lw=1)
        if positive.sum() > 2:
            t_loc, a_loc = local_exponent(t[positive], l2[:, layer][:, positive])
            ax_loc.semilogx(t_loc, a_loc, color=color, label=f"layer {layer}")
        if positive.all():
            t_end = fit.t_range[1] if fitted else int(t[-1])
            starts = np.unique(np.geomspace(2, max(3, t_end / 8), 12).astype(int))
            alphas = alpha_vs_window(t, l2[:, layer], starts, [t_end])[:, 0]
            ax_win.semilogx(starts, alphas, "o-", color=color, ms=3, label=f"layer {layer}")

    shown = "" if n_layers <= MOST_LAYERS_DRAWN else f" ({len(drawn_layers(n_layers))} of {n_layers} layers)"
    ax_off.set(xlabel="continuation position t", ylabel="offset ||h_a - h_b|| (mean over pairs)",
               title=f"offsets{shown}; fits dashed, noise floor dotted")
    ax_loc.axhline(1.0, color="grey", lw=1, ls="--")
    ax_loc.set(xlabel="t", ylabel="local exponent -dlog d / dlog t", title="local exponent (1 = pure dilution)")
    ax_win.set(xlabel="window start t_min (window ends at the fit's t_max)", ylabel="alpha", title="alpha against the fit window")
    plain_log_ticks(ax_win)  # matplotlib's labelled minor ticks ran into each other on short windows
    if kl is not None:
        kl_panel(ax_kl[0], t if kl_t is None else kl_t, kl, half_life)
    # One legend, outside the axes, so that no curve hides behind it.
    fig.legend(*ax_off.get_legend_handles_labels(), loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def plain_log_ticks(ax, axis: str = "x") -> None:
    """Label a log ``axis`` ("x" or "y") at 1, 2, 5, 10, 20, 50, ... inside its range, no minor labels
    (positions t read plainly)."""
    lo, hi = ax.get_xlim() if axis == "x" else ax.get_ylim()
    if not (ax.has_data() and 0 < lo < hi < np.inf):  # nothing drawn (every offset 0 beyond a window)
        return
    ticks = [m * 10**e for e in range(int(np.floor(np.log10(lo))), int(np.ceil(np.log10(hi))) + 1) for m in (1, 2, 5)]
    ticks = [v for v in ticks if lo <= v <= hi]
    (ax.set_xticks if axis == "x" else ax.set_yticks)(ticks, labels=[f"{v:g}" for v in ticks])
    (ax.xaxis if axis == "x" else ax.yaxis).set_minor_formatter(NullFormatter())


def mark_half_life(ax, half_life: dict, color, *, labels: bool = True) -> None:
    """A ``HalfLife.to_dict()`` on a KL panel: its half-life (dashed) and the t below the threshold
    (dotted) as vertical lines, each interval shaded; ``labels``: name them in the legend."""
    for key, ci_key, style, name in (("t", "ci", "--", "half of the peak"),
                                      ("t_below", "ci_below", ":", f"below {half_life['threshold']:g} nats")):
        if half_life[key] is not None:
            ax.axvline(half_life[key], color=color, ls=style, lw=1,
                       label=f"{name}: t = {half_life[key]:.0f}" if labels else None)
        if half_life[ci_key] is not None:
            ax.axvspan(*half_life[ci_key], color=color, alpha=0.07)


def kl_panel(ax, kl_t: np.ndarray, kl: np.ndarray, half_life: dict | None, *, pairs: str = "pairs") -> None:
    """The next-token KL against t (mean over pairs, 10 % to 90 % band), its half-life (dashed) and
    the t below the threshold (dotted), each with its interval shaded; ``pairs``: what the rows are."""
    kl = np.maximum(np.asarray(kl).reshape(-1, np.shape(kl)[-1]), 1e-12)
    ax.loglog(kl_t, kl.mean(0), color="k", lw=1.2, label=f"mean over {kl.shape[0]} {pairs}")
    if kl.shape[0] > 1:
        ax.fill_between(kl_t, *np.quantile(kl, [0.1, 0.9], axis=0), color="k", alpha=0.12, lw=0, label="10 % to 90 %")
    if half_life is not None:
        mark_half_life(ax, half_life, "C3")
    ax.set(xlabel="t", ylabel="next-token KL, nats", title="next-token KL (shaded: 95 % intervals)")
    ax.legend(fontsize=7)
