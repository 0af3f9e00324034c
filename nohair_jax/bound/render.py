"""A ``bound.json`` (``checks.check_bound``) read: as a text table and as one figure panel per layer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from nohair_jax.bound.records import NotApplicable, ShapeCheck, explicit_from_saved, shape_from_dict
from nohair_jax.figures import drawn_layers
from nohair_jax.fit import summary_curve
from nohair_jax.results import load_json, save_figure

def report(summary: dict) -> str:
    """The conditions and both checks of a ``bound.json`` as a readable table; each condition is printed with
    the verdict ``BoundConditions.conditions`` took on it (``checked``), and the summary line is theirs."""
    cond = summary["conditions"]
    depth = len(cond["logit_bound"])
    fmt = lambda values: " ".join(_number(v) for v in values)  # noqa: E731
    # Every verdict printed is one of ``checked``, and so is the summary line: none can contradict another.
    checked = cond["checked"]
    failures = [reason for c in checked for reason in c["failures"]]
    lines = [
        f"conditions of the theorem ({cond['mlp']} MLPs):",
        *(f"  {c['asks']}: {'holds' if c['holds'] else 'FAILS'} ({c['has']})" for c in checked),
        "  all conditions hold" if not failures else "  FAILS: " + "\n         ".join(failures),
        f"  D_l (prompt offsets), layers 0..{depth}: {fmt(cond['prompt_offsets'])}",
        *(f"  note: {note}" for note in cond["notes"]),
    ]
    explicit = explicit_from_saved(summary["explicit"])
    if "coefficients" in summary:
        co = summary["coefficients"]
        lines += [f"block coefficients a_l: {fmt(co['a'])}", f"                   b_l: {fmt(co['b'])}",
                  f"closed-form constants C_l (t >= t0 = {co['t0']}): {fmt(co['C'])}"]
    lines += ["", f"{'layer':>5}  {'shape: slope vs relay [interval]':>34}  {'ok':>3}  {'vs P(log t)^(l-1)/t':>20}  "
              f"{'explicit margin':>15}  {'closed margin':>13}  holds"]
    for layer in range(1, depth + 1):
        shape = shape_from_dict(summary["shape"][layer - 1])
        if not isinstance(shape, ShapeCheck):
            left = f"{'no fit: ' + shape.reason[:60]:>63}"
        else:
            lo, hi = (_number(v, "+7.3f") for v in shape.interval or (None, None))
            left = (f"{shape.slope:+8.3f} [{lo:>7}, {hi:>7}]{'':>9}  {'yes' if shape.passes else 'NO':>3}  "
                    f"{shape.slope_log_shape:+20.3f}")
        if isinstance(explicit, NotApplicable):
            right = "not applicable"
        else:
            e = explicit[layer - 1]
            holds = "yes" if e.holds and e.holds_closed else "VIOLATED"
            right = f"{_number(e.margin):>15}  {_number(e.margin_closed):>13}  {holds}"
        lines.append(f"{layer:>5}  {left}  {right}")
    if isinstance(explicit, NotApplicable):
        lines.append(f"explicit bound not applicable: {explicit.reason}")
    return "\n".join(lines)


def _number(value, spec=".3g") -> str:
    """A JSON number for a table; None is what JSON keeps of inf and nan (an all-zero offset curve)."""
    return "-" if value is None else format(value, spec)


def bound_figure(t, l2, relay_shape, summary: dict, recursion=None, closed=None) -> Figure:
    """One log-log panel per layer (at most 9, spread over depth: ``figures.drawn_layers``): measured
    offsets (mean and max over pairs), the relay model's shape with its fitted prefactor, the explicit
    bound (recursion and closed form) where float64 holds it. Arrays as in ``bound.npz``."""
    layers = drawn_layers(l2.shape[1] - 1, most=9)
    cols = min(len(layers), 3)
    rows = -(-len(layers) // cols)
    fig = Figure(figsize=(5 * cols, 3.8 * rows))
    axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False).ravel())
    for layer, ax in zip(layers, axes):
        positive = (l2[:, layer] > 0).all(axis=0)
        ax.loglog(t[positive], summary_curve(l2[:, layer])[positive], color="C0", label="measured, mean over pairs")
        ax.loglog(t[positive], l2[:, layer].max(axis=0)[positive], color="C0", lw=0.7, alpha=0.6, label="measured, max")
        shape = shape_from_dict(summary["shape"][layer - 1])
        if isinstance(shape, ShapeCheck):
            ax.loglog(t, shape.relay_prefactor * relay_shape[layer], "k--", lw=1, label="relay model, fitted prefactor")
        title = f"layer {layer}"
        if recursion is not None and not np.isfinite(recursion[layer]).any():
            title += ": explicit bound beyond float64"
        elif recursion is not None:
            for curve, style, label in ((recursion[layer], "-", "explicit bound (recursion)"),
                                        (closed[layer], ":", "C_l P (log t)^(l-1) / t")):
                finite = np.isfinite(curve)
                ax.loglog(t[finite], curve[finite], color="C3", ls=style, label=label)
            title += f": bound / measured >= {_number(explicit_from_saved(summary['explicit'])[layer - 1].margin)}"
        ax.set(title=title, xlabel="continuation position t", ylabel="offset ||h_a - h_b||")
    for ax in axes[len(layers):]:
        ax.set_visible(False)
    axes[0].legend(fontsize=7)
    cfg = summary["model"]
    fig.suptitle(f"{cfg['n_layers']} layers, d_model {cfg['d_model']}, P = {summary['prompt_len']}, "
                 f"{summary['n_pairs']} pairs" + ("" if recursion is not None else "; explicit bound not applicable"))
    fig.tight_layout()
    return fig


def draw_bound(out_dir: str | Path) -> Path:
    """Draw ``bound.png`` from ``bound.npz`` and ``bound.json`` in ``out_dir``."""
    out_dir = Path(out_dir)
    with np.load(out_dir / "bound.npz") as data:
        fig = bound_set_figure(dict(data), load_json(out_dir / "bound.json"))
    return save_figure(out_dir / "bound.png", fig)


def bound_set_figure(data: dict, summary: dict):
    """``bound_figure`` of one result set: bound.npz's arrays and bound.json's contents."""
    bounds = (data["recursion"], data["closed"]) if "recursion" in data else (None, None)
    return bound_figure(data["t"], data["l2"], data["relay_shape"], summary, *bounds)
