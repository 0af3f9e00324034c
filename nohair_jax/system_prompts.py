"""How long system prompts keep steering a model's reading of the same user messages (``nohair prompts``).

For every pair of system prompts (i, j): each user message rendered after each of them in the
model's chat form (``chat.system_prompt_pairs``), the offsets at every layer and the next-token KL
at every t of the shared continuation (``measurement.measure``), and from them the KL's peak, its
half-life and the t where it falls below a threshold, with intervals over messages
(``fit.kl_half_life``), and alpha per layer. With a conversation's earlier turns, the influence
k turns later (``after_turns``): the KL at the assistant's first token after 0, 1, .., K exchanges
between the system prompt and the message. Writes one measurement folder per pair
(``systems_<i>_<j>/``: offsets.npz, fit.json), ``prompts.json`` and ``prompts.png`` (the KL curve
of every pair with its half-life marked, alpha per layer, the KL against k), the last two together.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from nohair_jax.chat import ChatTemplate, system_prompt_pairs
from nohair_jax.figures import mark_half_life
from nohair_jax.fit import FitRefused, HalfLife, alpha_table, fit_from_dict, kl_half_life, t_interval
from nohair_jax.results import save_figure, save_json, written_together

# Raw text where a model has no chat template: the system prompt, a blank line, the message (with
# --history: every turn, each after a blank line). One expression: a block tag would eat the newline after it (trim_blocks).
RAW = ChatTemplate("{{ messages | map(attribute='content') | join('\\n\\n') }}",
                   origin="--raw (no chat template: system prompt, blank line, message)")


def prompt_pairs(tokenizer, template: ChatTemplate, systems: list[str], messages: list[str], *,
                 length: int | None = None) -> dict:
    """(i, j) -> ``chat.SystemPromptPairs`` of system prompts i < j (0-based) on ``messages``; ValueError
    for fewer than two system prompts."""
    if len(systems) < 2:
        raise ValueError(f"give two or more system prompts, got {len(systems)}")
    return {(i, j): system_prompt_pairs(tokenizer, template, systems[i], systems[j], messages, length=length)
            for i, j in itertools.combinations(range(len(systems)), 2)}


def after_turns(model, tokenizer, template: ChatTemplate, system_a: str, system_b: str, messages: list[str],
                history: list[dict], turns: int) -> list[dict]:
    """The influence k turns later, for k = 0..``turns``: the first k exchanges of ``history`` (user,
    assistant) between the system prompt and each message, and the next-token KL (nats) at the
    assistant's first token, each message's last position (``chat.system_prompt_pairs`` with
    ``whole``): its mean over messages with a 95 % t-interval (standard error of the mean, n - 1
    degrees of freedom; None for one message)."""
    from nohair_jax.offsets import prompt_pair_offsets

    rows = []
    for k in range(turns + 1):
        sp = system_prompt_pairs(tokenizer, template, system_a, system_b, messages, history=history[: 2 * k], whole=True)
        kl = prompt_pair_offsets(model, *sp.pairs).kl[np.arange(len(messages)), sp.shared - 1]
        n = kl.size
        ci = None if n < 2 else t_interval(float(kl.mean()), float(kl.std(ddof=1) / np.sqrt(n)), n - 1)
        rows.append(dict(turns=k, kl_reply=float(kl.mean()), ci=ci and list(ci), per_message=kl.tolist(),
                         length=int(sp.pairs.continuations.shape[1])))
    return rows


def measure_system_prompts(model, pairs: dict, systems: list[str], out: str | Path, *, threshold: float = 0.01,
                           fit_t_min: int = 8, n_boot: int = 1000, turns=None, meta: dict | None = None) -> dict:
    """Measure every pair of ``pairs`` (``prompt_pairs`` of the system prompts ``systems``) on
    ``model`` and write the result set into ``out`` (module docstring), ``meta`` in its JSON;
    returns ``prompts.json``'s contents. ``n_boot``: bootstrap resamples of every interval. ``fit_t_min``: the start of every fit
    window (positions); ``threshold``: nats, for the t where the KL falls below it; ``turns``: None,
    or ``(i, j) -> after_turns(...)`` rows for each pair."""
    from nohair_jax.measurement import measure

    out = Path(out)
    rows = []
    for (i, j), sp in pairs.items():
        m = measure(model, sp.pairs, fit_kwargs=dict(t_min=fit_t_min, n_boot=n_boot), progress=True)
        folder = f"systems_{i + 1}_{j + 1}"
        saved = m.save(out / folder, meta=dict(meta or {}, systems=[systems[i], systems[j]]), figure=False)
        half = kl_half_life(m.offsets.kl, threshold=threshold, n_boot=n_boot)
        rows.append(dict(systems=[i + 1, j + 1], folder=folder, messages=int(sp.pairs.continuations.shape[0]),
                         prompt_tokens=[int(sp.pairs.prompts_a.shape[1]), int(sp.pairs.prompts_b.shape[1])],
                         length=int(sp.pairs.continuations.shape[1]), shared_tokens=sp.shared.tolist(),
                         message_t=sp.message_t.tolist(),
                         rendered=list(sp.texts), half_life=half.to_dict(), fits=saved["fits"],
                         kl_mean=m.offsets.kl.mean(0).tolist(), **({} if turns is None else dict(turns=turns(i, j)))))
    summary = dict(meta or {}, systems=list(systems), threshold=threshold, fit_t_min=fit_t_min, pairs=rows)
    with written_together():  # the JSON and its figure replace an earlier set together, or neither does
        save_json(out / "prompts.json", summary)
        save_figure(out / "prompts.png", figure(summary))
    return summary


def report(summary: dict) -> str:
    """The printed table: per pair of system prompts, the KL's half-life line and alpha of a few layers."""
    lines = ["system prompts: " + "; ".join(f"{k}: {s[:60]!r}" for k, s in enumerate(summary["systems"], start=1))]
    for row in summary["pairs"]:
        half = HalfLife.from_dict(row["half_life"])
        fits = [fit_from_dict(f) for f in row["fits"]]
        n = len(fits)
        layers = sorted({1, max(1, n // 2), n})
        alpha = "; ".join(f"layer {k}: " + (f"no fit ({fits[k - 1].reason})" if isinstance(fits[k - 1], FitRefused)
                                            else fits[k - 1].brief()) for k in layers)
        lines += ["", f"systems {row['systems'][0]} and {row['systems'][1]}: {row['messages']} messages, "
                      f"prompts of {row['prompt_tokens'][0]} and {row['prompt_tokens'][1]} tokens, T = {row['length']} "
                      f"shared tokens (the user messages begin at t = {min(row['message_t'])} to {max(row['message_t'])})",
                  f"  {half}",
                  *[f"  after {r['turns']} earlier turn(s): KL at the reply's first token {r['kl_reply']:.3g} nats"
                    + ("" if r["ci"] is None else f" [{r['ci'][0]:.3g}, {r['ci'][1]:.3g}]") for r in row.get("turns", ())], f"  alpha (offset ~ t^-alpha, t >= {summary['fit_t_min']}): {alpha}"]
    return "\n".join(lines)


def figure(summary: dict) -> Figure:
    """The next-token KL of every pair of system prompts against t (mean over messages), its
    half-life and the t below the threshold marked with their intervals; alpha per layer beside."""
    with_turns = any("turns" in row for row in summary["pairs"])
    fig = Figure(figsize=(18 if with_turns else 12, 4.6))
    ax_kl, ax_alpha, *ax_turns = fig.subplots(1, 3 if with_turns else 2)
    for k, row in enumerate(summary["pairs"]):
        color = f"C{k % 10}"
        kl = np.maximum(np.asarray(row["kl_mean"]), 1e-12)
        t = np.arange(1, kl.size + 1)
        name = f"systems {row['systems'][0]} and {row['systems'][1]}"
        ax_kl.loglog(t, kl, color=color, label=name)
        starts = [v for v in row["message_t"] if v > 0]
        if starts:  # where the user messages begin (the template's tokens before them: KL near 0)
            ax_kl.plot(sorted(set(starts)), [0.99] * len(set(starts)), "v", color=color, ms=7,
                       transform=ax_kl.get_xaxis_transform(), clip_on=False)
        mark_half_life(ax_kl, row["half_life"], color, labels=False)
        table = alpha_table([fit_from_dict(f) for f in row["fits"]])
        layers = np.arange(1, table.shape[0] + 1)
        ax_alpha.errorbar(layers + 0.15 * k, table[:, 0], yerr=np.abs(table[:, 1:].T - table[:, 0]), fmt="o", ms=3,
                          color=color, lw=1, label=name)
        if "turns" in row:
            k_turns = np.asarray([r["turns"] for r in row["turns"]])
            mean = np.asarray([r["kl_reply"] for r in row["turns"]])
            bars = np.asarray([r["ci"] or [m, m] for r, m in zip(row["turns"], mean)]).T
            ax_turns[0].errorbar(k_turns + 0.05 * k, mean, yerr=np.abs(bars - mean), fmt="o-", ms=4, color=color,
                                 lw=1, label=name)
    ax_kl.axhline(summary["threshold"], color="0.6", lw=0.8)
    ax_kl.set(xlabel="t, position in the shared continuation (triangles: where the user messages begin)", ylabel="next-token KL, nats (mean over messages)",
              title=f"dashed: half of the peak; dotted: below {summary['threshold']:g} nats (shaded: 95 % intervals)")
    ax_kl.legend(fontsize=8)
    ax_alpha.axhline(0, color="0.7", lw=0.8)
    ax_alpha.set(xlabel="layer", ylabel="alpha (95 % interval)", title=f"offsets: alpha per layer, t >= {summary['fit_t_min']}")
    ax_alpha.xaxis.get_major_locator().set_params(integer=True)
    ax_alpha.legend(fontsize=8)
    if with_turns:
        ax_turns[0].set(xlabel="earlier turns k (user and assistant) after the system prompt",
                        ylabel="KL at the reply's first token, nats", title="the influence k turns later (95 % intervals)")
        ax_turns[0].xaxis.get_major_locator().set_params(integer=True)
        ax_turns[0].legend(fontsize=8)
    fig.tight_layout()
    return fig


__all__ = ["RAW", "after_turns", "figure", "measure_system_prompts", "prompt_pairs", "report"]
