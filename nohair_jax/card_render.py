"""A prompt-memory card for a reader: ``card.md``, ``card.png``, and several cards side by side.

Everything here is drawn from a card's JSON data alone (``card.measure_card``'s, or ``card.read_card``'s of a
saved ``card.json``), so that a card can be drawn again, and compared, without its model. The schema:
``card.CARD_FIELDS``, ``card.LAYER_FIELDS``, docs/card.md.
"""

from __future__ import annotations

import numpy as np

from nohair_jax.fit import HalfLife


def model_name(card: dict) -> str:
    """A short name for the card's model: what its package calls it (the text of ``PackagedModel.about`` before
    its first parenthesis), else the GGUF file's general.name, the folder's name, or the source."""
    model = card["model"]
    packaged = (model.get("package") or {}).get("about", "").split(" (")[0]
    return str(packaged or model.get("name") or model.get("source") or "model")


def _alpha(layer: dict) -> str:
    if layer["alpha"] is None:
        return "no fit"
    ci = layer["alpha_ci"]
    return f"{layer['alpha']:.2f}" + ("" if ci is None else f" [{ci[0]:.2f}, {ci[1]:.2f}]")


def _window_text(card: dict) -> str:
    windows = [layer["window"] for layer in card["layers"]]
    on = [k for k, w in enumerate(windows, start=1) if w is not None]
    if not on:
        return "none: every layer reads every earlier key"
    width = card["window"]["sliding_window"]
    which = "every layer" if len(on) == len(windows) else f"{len(on)} of {len(windows)} layers"
    return f"{width} tokens on {which}"


def _conditions_text(card: dict) -> str:
    failing = [c["asks"] for c in card["conditions"]["checked"] if not c["holds"]]
    return "all hold" if not failing else "fail: " + "; ".join(failing)


def _half_life_text(card: dict) -> str:
    return str(HalfLife.from_dict(card["kl"]["half_life"]))


def card_markdown(card: dict) -> str:
    """``card.md``: the model's provenance, the protocol, the KL's half-life, the table per layer (alpha with
    its interval, the relay's prediction, the sink share, the window and its reach, B, sigma_min, the shape
    slope), the theorem's conditions, and what each column means."""
    model, proto, form, kl = card["model"], card["protocol"], card["chat_form"], card["kl"]
    cfg = model["config"]
    hashes = model.get("sha256")
    if not isinstance(hashes, str):  # a folder: each file's
        hashes = "; ".join(f"{name} {value}" for name, value in (hashes or {}).items())
    digest = hashes or "none recorded"
    package = model.get("package")
    lines = [
        f"# Prompt-memory card: {model_name(card)}", "",
        f"Made by `nohair card` (nohair_jax {card['nohair_version']}, card schema {card['schema_version']}) on "
        f"{card['made']} in {card['wall_s'] / 60:.1f} minutes. Figure: [card.png](card.png).", "",
        "## The model", "",
        f"- source: `{model.get('source', '')}` ({model.get('format', 'a model built in Python')}); "
        f"file: `{model.get('path', '')}`",
        f"- family: {model.get('family')}; {cfg['n_layers']} layers, d_model {cfg['d_model']}, {cfg['n_heads']} heads "
        f"({cfg['n_kv_heads'] or cfg['n_heads']} key/value), vocabulary {cfg['vocab_size']}, {cfg['position']} positions, "
        f"{cfg['norm']} {cfg['norm_placement']}-norm, MLP {cfg['mlp']}, dtype {cfg['dtype']}",
        f"- sha256: {digest}",
    ]
    if package:
        lines.append(f"- package: {package['distribution']} {package['version']} ({package['file']}): {package['about']}")
    if model.get("gguf"):
        types = ", ".join(f"{n} {k}" for k, n in model["gguf"]["tensor_types"].items())
        lines.append(f"- GGUF tensors: {types}; {model['gguf']['computed_as']}")
    lines += [
        f"- sliding window: {_window_text(card)}", "",
        "## The protocol", "",
        f"{proto['n_pairs']} prompt pairs cut from the held-out part of the embedded corpus (seed {proto['pair_seed']}) in "
        f"the model's tokens, in its chat form ({_form_text(form)}). Each prompt: the opening "
        f"{form['head_text']!r} ({len(form['head'])} tokens), then {proto['prompt_text']} tokens of text as the system "
        f"prompt: P = {form['prompt_len']}. The continuation both share: {form['mid_text']!r} ({len(form['mid'])} "
        f"tokens), then user text, T = {form['length']} tokens in all.",
        f"alpha: offset ~ t^-alpha on t in [{proto['fit_t_min']}, T] (ended early by the float32 noise floor, measured "
        f"on {proto['floor_pairs']} pair(s) in float64), 95 % t-interval over the {proto['n_pairs']} pairs "
        f"({proto['n_boot']} bootstrap resamples). The KL at {proto['kl_positions']} positions. The calibrated relay on "
        f"the first {proto['relay_pairs']} pairs, the attention on the first key on {proto['sink_pairs']} sequences, the "
        f"conditions on {proto['condition_pairs']} pairs.", "",
        "## How long the prompt steers", "",
        (f"On the user text (t >= {kl['text_from']}; before it the KL predicts the template's turn tokens): "
         if kl["text_from"] > 1 else "") + _half_life_text(card), "",
        f"Last layer: alpha {_alpha(card['layers'][-1])}. The theorem's conditions: {_conditions_text(card)}. "
        f"Key 0 a sink (share above {card['sinks']['sink_factor']} times dilution's "
        f"{card['sinks']['dilution_share']:.4f}) in {card['sinks']['layers_above']} of {card['n_layers']} layers.", "",
        "## Per layer", "",
        "| layer | alpha [95 %] | fit window | relay alpha | sink share (x dilution) | window | reach | B | "
        "sigma_min attn, mlp | shape slope [95 %] |",
        "|---:|---|---|---:|---|---:|---:|---:|---|---|",
    ]
    dilution = card["sinks"]["dilution_share"]
    for layer in card["layers"]:
        window = "-" if layer["fit_window"] is None else f"{layer['fit_window'][0]}-{layer['fit_window'][1]}"
        relay = "-" if layer["relay_alpha"] is None else f"{layer['relay_alpha']:.2f}"
        shape = "-" if layer["shape_slope"] is None else f"{layer['shape_slope']:+.2f}" + (
            "" if layer["shape_ci"] is None else f" [{layer['shape_ci'][0]:+.2f}, {layer['shape_ci'][1]:+.2f}]")
        lines.append(
            f"| {layer['layer']} | {_alpha(layer)} | {window} | {relay} | {layer['sink_share']:.3g} "
            f"({layer['sink_share'] / dilution:.0f}x){' sink' if layer['sink'] else ''} | "
            f"{'all' if layer['window'] is None else layer['window']} | "
            f"{'unlimited' if layer['reach'] is None else layer['reach']} | {layer['logit_bound']:.3g} | "
            f"{layer['sigma_min_attention']:.3g}, {layer['sigma_min_mlp']:.3g} | {shape} |")
    notes = [f"- layer {layer['layer']}: {layer['fit_note']}" for layer in card["layers"] if layer["fit_note"]]
    if notes:
        lines += ["", "Fit notes:", "", *notes]
    relay = card["relay"]
    lines += ["", "## The calibrated relay", "",
              ("Predicted by the linear relay recursion with this model's own attention (averaged over heads and the "
               f"first {relay['pairs']} pairs) and gains (nohair_jax.calibrated_relay; docs/relay.md), fitted on each "
               "layer's measured window; one curve, so no interval." if relay["applies"]
               else f"Not applicable: {relay['reason']}"), "",
              "## The theorem's conditions", "",
              f"Measured on {card['conditions']['pairs']} pairs (docs/definitions.md#bound, `nohair bound`).", "",
              "| condition | the model has | holds |", "|---|---|---|"]
    for cond in card["conditions"]["checked"]:
        holds = "yes" if cond["holds"] else "no: " + "; ".join(cond["failures"])
        has = cond["has"] if len(cond["has"]) <= 200 else cond["has"][:200] + "..."
        lines.append(f"| {_cell(cond['asks'])} | {_cell(has)} | {_cell(holds)} |")
    conditions = card["conditions"]
    for note in conditions["notes"] + [f"the explicit bound is not derived: {r}" for r in conditions["not_derived"]]:
        lines.append(f"\n- {note}")
    lines += ["", "## Columns", "",
              "alpha: the offset ||h_a - h_b|| at layer l decays as t^-alpha over the fit window. relay alpha: the "
              "calibrated relay's prediction on the same window. sink share: the attention the second half of the "
              "queries puts on key 0, mean over heads, and its ratio to pure dilution's. window: the layer's sliding "
              "window (all: every earlier key). reach: how many tokens back the residual stream after this layer can "
              "carry information. B: the largest attention logit; sigma_min: the smallest input scale of the block's "
              "norms. shape slope: the log-log slope of offset / the relay model's shape over [T/16, T] (at most 0: "
              "relay adds only log factors). docs/card.md has the definitions.", ""]
    return "\n".join(lines)


def _cell(text: str) -> str:
    """``text`` for a markdown table's cell: its pipes escaped (``|logit|`` would end the cell)."""
    return text.replace("|", "\\|")


def _form_text(form: dict) -> str:
    return {"template": f"the chat template of {form['origin']}, a system turn",
            "folded": f"the chat template of {form['origin']}, which takes no system role: the system prompt opens the "
                      "user message",
            "raw": "no chat template: the system prompt, a blank line, the message"}[form["kind"]]


# ------------------------------------------------------------------------------------- figures


def _alpha_points(card: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """layers [L], alpha [L], its interval [2, L] (nan where none) and the relay's alpha [L] (nan where none)."""
    layers = np.array([layer["layer"] for layer in card["layers"]])
    nan = lambda v: np.nan if v is None else v  # noqa: E731
    alpha = np.array([nan(layer["alpha"]) for layer in card["layers"]], float)
    ci = np.array([layer["alpha_ci"] or [np.nan, np.nan] for layer in card["layers"]], float).T
    relay = np.array([nan(layer["relay_alpha"]) for layer in card["layers"]], float)
    return layers, alpha, ci, relay


def _shade_windows(ax, card: dict) -> None:
    """Shade the layers that have a sliding window (one legend entry)."""
    first = True
    for layer in card["layers"]:
        if layer["window"] is not None:
            ax.axvspan(layer["layer"] - 0.5, layer["layer"] + 0.5, color="0.88", lw=0, zorder=0,
                       label=f"{layer['window']}-token window" if first else None)
            first = False


def card_figure(card: dict):
    """``card.png``: alpha per layer with its 95 % interval and the calibrated relay's prediction; key 0's share
    of the attention per layer against dilution; the next-token KL against t with its half-life; the theorem's
    conditions in the title. Drawn from the card's JSON data alone."""
    from matplotlib.figure import Figure

    from nohair_jax.figures import kl_panel, plain_log_ticks

    fig = Figure(figsize=(19, 5.2))
    ax_alpha, ax_sink, ax_kl = fig.subplots(1, 3, gridspec_kw=dict(width_ratios=[1.5, 1.0, 1.0]))
    layers, alpha, ci, relay = _alpha_points(card)
    _shade_windows(ax_alpha, card)
    ax_alpha.axhline(0, color="0.6", lw=0.8)
    ax_alpha.axhline(1, color="0.6", lw=0.8, ls=":", label="1: dilution P / (P + t)")
    ax_alpha.errorbar(layers, alpha, yerr=np.abs(ci - alpha), fmt="o", color="k", ms=4, lw=1.2, capsize=2,
                      label="measured, 95 % interval over pairs")
    if np.isfinite(relay).any():
        ax_alpha.plot(layers, relay, "x", color="C3", ms=7, mew=1.8, label="calibrated relay's prediction")
    proto = card["protocol"]
    ax_alpha.set(xlabel="layer", ylabel="alpha (offset ~ t^-alpha)", xlim=(0.3, len(layers) + 0.7),
                 title=f"alpha per layer, t in [{proto['fit_t_min']}, {card['chat_form']['length']}]"
                       + ("" if card["relay"]["applies"] else "; relay: not applicable"))
    ax_alpha.xaxis.get_major_locator().set_params(integer=True)
    ax_alpha.legend(fontsize=8, loc="best")

    share = np.array([layer["sink_share"] for layer in card["layers"]])
    sink = np.array([layer["sink"] for layer in card["layers"]])
    dilution, factor = card["sinks"]["dilution_share"], card["sinks"]["sink_factor"]
    _shade_windows(ax_sink, card)
    seen = share > 0
    ax_sink.semilogy(layers[seen], share[seen], "-", color="0.6", lw=0.8)
    ax_sink.plot(layers[sink], share[sink], "o", color="C0", ms=5, label="a sink")
    ax_sink.plot(layers[seen & ~sink], share[seen & ~sink], "o", color="C7", ms=5, label="not a sink")
    if (~seen).any():  # 0 on a log axis: marked at the bottom edge
        ax_sink.plot(layers[~seen], np.full((~seen).sum(), 0.02), "v", color="C7", mfc="none", ms=6,
                     transform=ax_sink.get_xaxis_transform(), label="0: key 0 outside the window")
    ax_sink.axhline(dilution, color="k", lw=1, ls=":", label=f"dilution {dilution:.2g}")
    ax_sink.axhline(factor * dilution, color="k", lw=1, ls="--", label=f"{factor}x dilution")
    ax_sink.set(xlabel="layer", ylabel="attention on key 0 (mean over heads)", xlim=(0.3, len(layers) + 0.7),
                title=f"the first key's share: a sink in {card['sinks']['layers_above']} of {card['n_layers']} layers")
    ax_sink.xaxis.get_major_locator().set_params(integer=True)
    ax_sink.legend(fontsize=8, loc="best")

    kl = card["kl"]
    kl_panel(ax_kl, np.asarray(kl["t"]), np.asarray(kl["per_pair"]), kl["half_life"])
    plain_log_ticks(ax_kl)
    if kl["text_from"] > 1:  # the KL there predicts the template's turn tokens: not part of the half-life
        ax_kl.axvspan(ax_kl.get_xlim()[0], kl["text_from"], color="0.85", zorder=0,
                      label=f"t < {kl['text_from']}: turn tokens")
        ax_kl.legend(fontsize=8, loc="best")
    half = HalfLife.from_dict(kl["half_life"])
    ax_kl.set_title(f"next-token KL on the user text: half-life {'> T' if half.t is None else f'{half.t:.0f}'} tokens")
    fig.suptitle(f"{model_name(card)}: {card['n_layers']} layers; P = {card['chat_form']['prompt_len']}, "
                 f"T = {card['chat_form']['length']}, {proto['n_pairs']} pairs "
                 f"{'as plain text (no chat template)' if card['chat_form']['kind'] == 'raw' else 'in its chat form'}; "
                 f"the theorem's conditions {_conditions_text(card)}", fontsize=11)
    fig.tight_layout()
    return fig


def compare_table(cards: list[dict], names: list[str]) -> str:
    """A markdown table with one column per card (``names``, the files) and one row per summary: the model,
    its hash, P, alpha of the last layer and over layers, the relay's prediction, the KL's peak, half-life and
    fall below the threshold, the sinks, the window and the theorem's conditions."""
    def last(card):
        return card["layers"][-1]

    def spread(card):
        fitted = [(layer["alpha"], layer["layer"]) for layer in card["layers"] if layer["alpha"] is not None]
        if not fitted:
            return "no fit"
        (lo, at_lo), (hi, at_hi) = min(fitted), max(fitted)
        return f"median {np.median([a for a, _ in fitted]):.2f}; {lo:.2f} (layer {at_lo}) to {hi:.2f} (layer {at_hi})"

    def relay(card):
        if not card["relay"]["applies"]:
            return "not applicable"
        errors = [layer["relay_alpha"] - layer["alpha"] for layer in card["layers"]
                  if layer["relay_alpha"] is not None and layer["alpha"] is not None]
        value = last(card)["relay_alpha"]
        return ("no fit" if value is None else f"{value:.2f}") + (
            f"; predicted minus measured, median over layers {np.median(errors):+.2f}" if errors else "")

    def digest(card):
        hashes = card["model"].get("sha256")
        if isinstance(hashes, dict):
            hashes = hashes.get("model.safetensors") or next(iter(hashes.values()), None)
        return "-" if not hashes else f"`{hashes[:12]}`"

    def where(t, ci, length):
        text = f"> T = {length}" if t is None else f"{t:.0f}"
        return text if ci is None else text + f" [{ci[0]:.0f}, " + (f">= {length}]" if ci[1] >= length else f"{ci[1]:.0f}]")

    def half_life(card, key, ci_key):
        half = card["kl"]["half_life"]
        return where(half[key], half[ci_key], half["length"])

    rows = [
        ("family, layers", lambda c: f"{c['model'].get('family')}, {c['n_layers']} layers, "
                                     f"d_model {c['model']['config']['d_model']}"),
        ("sha256", digest),
        ("chat form, P", lambda c: f"{c['chat_form']['kind']}, P = {c['chat_form']['prompt_len']}"),
        ("alpha, last layer [95 %]", lambda c: _alpha(last(c))),
        ("alpha over layers", spread),
        ("relay's alpha, last layer", relay),
        ("KL peak, nats", lambda c: f"{c['kl']['half_life']['kl_peak']:.3g} at t = {c['kl']['half_life']['peak_t']:.0f}"),
        ("KL half-life, tokens [95 %]", lambda c: half_life(c, "t", "ci")),
        (f"KL below {cards[0]['protocol']['kl_threshold']:g} nats at t [95 %]", lambda c: half_life(c, "t_below", "ci_below")),
        ("key 0 a sink", lambda c: f"{c['sinks']['layers_above']} of {c['n_layers']} layers"),
        ("sliding window", _window_text),
        ("theorem's conditions", _conditions_text),
        ("minutes to make", lambda c: f"{c['wall_s'] / 60:.1f}"),
    ]
    header = "| | " + " | ".join(f"{model_name(c)} ({name})" for c, name in zip(cards, names)) + " |"
    lines = [header, "|---" * (len(cards) + 1) + "|"]
    lines += ["| " + label + " | " + " | ".join(_cell(fn(c)) for c in cards) + " |" for label, fn in rows]
    proto = cards[0]["protocol"]
    lines += ["", f"Protocol (every card): {proto['n_pairs']} pairs, {proto['prompt_text']} tokens of system prompt text, "
                  f"T = {proto['length']}, alpha on t in [{proto['fit_t_min']}, T], 95 % t-intervals over pairs "
                  "(docs/card.md)."]
    return "\n".join(lines) + "\n"


def compare_figure(cards: list[dict], names: list[str]):
    """One figure of several cards: alpha per layer against relative depth l / L (intervals; the relay's
    prediction as crosses), key 0's share of the attention, and the next-token KL's mean against t with each
    half-life (dashed)."""
    from matplotlib.figure import Figure

    from nohair_jax.figures import plain_log_ticks

    fig = Figure(figsize=(19, 5.2))
    ax_alpha, ax_sink, ax_kl = fig.subplots(1, 3, gridspec_kw=dict(width_ratios=[1.5, 1.0, 1.0]))
    for k, card in enumerate(cards):
        color, label = f"C{k % 10}", model_name(card)
        layers, alpha, ci, relay = _alpha_points(card)
        depth = layers / card["n_layers"]
        ax_alpha.errorbar(depth, alpha, yerr=np.abs(ci - alpha), fmt="o-", color=color, ms=3.5, lw=1, capsize=1.5,
                          label=f"{label} ({card['n_layers']} layers)")
        if np.isfinite(relay).any():
            ax_alpha.plot(depth, relay, "x", color=color, ms=6, mew=1.5)
        share = np.array([layer["sink_share"] for layer in card["layers"]])
        ax_sink.semilogy(depth, share, "o-", color=color, ms=3.5, lw=1, label=label)
        ax_sink.axhline(card["sinks"]["dilution_share"], color=color, lw=0.8, ls=":")
        kl = card["kl"]
        mean = np.maximum(np.asarray(kl["per_pair"]).mean(axis=0), 1e-12)
        ax_kl.loglog(kl["t"], mean, color=color, lw=1.3, label=label)
        if kl["half_life"]["t"] is not None:
            ax_kl.axvline(kl["half_life"]["t"], color=color, ls="--", lw=1)
    ax_alpha.axhline(0, color="0.6", lw=0.8)
    ax_alpha.set(xlabel="relative depth l / L", ylabel="alpha (offset ~ t^-alpha)",
                 title="alpha per layer, 95 % intervals; crosses: the calibrated relay's prediction")
    ax_alpha.legend(fontsize=8)
    ax_sink.set(xlabel="relative depth l / L", ylabel="attention on key 0 (mean over heads)",
                title="the first key's share (dotted: dilution)")
    ax_kl.set(xlabel="t", ylabel="next-token KL, nats (mean over pairs)", title="next-token KL; dashed: half-life")
    plain_log_ticks(ax_kl)
    ax_kl.legend(fontsize=8)
    fig.suptitle(f"{len(cards)} prompt-memory cards, one protocol: " + ", ".join(names), fontsize=11)
    fig.tight_layout()
    return fig


__all__ = ["card_figure", "card_markdown", "compare_figure", "compare_table", "model_name"]
