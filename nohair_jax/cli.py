"""The ``nohair`` command line.

``nohair offsets``: build an (untrained) model, measure prompt-pair offsets on random token
pairs, fit alpha per layer above the measured noise floor, print the table, write
``offsets.npz``, ``fit.json`` and ``offsets.png``.

``nohair bound``: the same kind of model and pairs; measure the no-hair bound's conditions, check
the offsets against the bound's shape and its explicit form per layer, print both, write
``bound.npz``, ``bound.json`` and ``bound.png``.

``nohair train``: train a byte-level model on the embedded corpus (or ``--corpus FILE``) with
checkpoints, resuming where a previous run in ``--out`` stopped; optionally measure alpha at
chosen steps (``--measure-every``).
"""

from __future__ import annotations

import argparse
import sys
import time

from nohair_jax.model import MLP_KINDS, NORM_KINDS, NORM_PLACEMENTS, POSITION_KINDS, PromptLogitBias, TransformerConfig


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {value}")
    return value


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
                   help="add the dilution-cancelling prompt logit bias with strength GAMMA (DESIGN.md section 4)")
    g.add_argument("--seed", type=int, default=0, help="parameter initialisation seed (default 0)")


def _add_pair_args(g, *, length: int, pairs: int) -> None:
    g.add_argument("--prompt-len", type=_positive_int, default=16, help="prompt length P in tokens (default 16)")
    g.add_argument("--length", type=_positive_int, default=length, help=f"continuation length T in tokens (default {length})")
    g.add_argument("--pairs", type=_positive_int, default=pairs, help=f"number of prompt pairs (default {pairs})")
    g.add_argument("--pair-seed", type=int, default=1, help="seed of the prompt pairs (default 1)")


def _model_config(args, total_len: int) -> TransformerConfig:
    bias = None if args.logit_bias is None else PromptLogitBias(args.prompt_len, args.logit_bias)
    return TransformerConfig(
        d_model=args.d_model, n_heads=args.heads, n_kv_heads=args.kv_heads, n_layers=args.depth, mlp=args.mlp,
        norm=args.norm, norm_placement=args.norm_placement, position=args.position, max_len=total_len,
        prompt_logit_bias=bias,
    )


def _fits_table(summary: dict) -> str:
    """alpha per layer of a ``fit.json`` as a readable table."""
    lines = [
        f"\nalpha per layer (fit window and {summary['fits'][0].get('confidence', 0.95):.0%} bootstrap interval over pairs)",
        f"{'layer':>5}  {'alpha':>6}  {'interval':>15}  {'R^2':>6}  {'window t':>12}  {'floor at t':>10}",
    ]
    for layer, fit in enumerate(summary["fits"], start=1):
        if "error" in fit:
            lines.append(f"{layer:>5}  no fit: {fit['error']}")
            continue
        lo, hi = fit["ci"] if None not in fit["ci"] else (float("nan"), float("nan"))
        floor = "-" if fit["floor_t"] is None else str(fit["floor_t"])
        window = f"{fit['t_range'][0]}-{fit['t_range'][1]}"
        lines.append(f"{layer:>5}  {fit['alpha']:6.3f}  [{lo:6.3f}, {hi:6.3f}]  {fit['r2']:6.3f}  {window:>12}  {floor:>10}")
    return "\n".join(lines)


def _on_untrained_model(args, doing: str, job, report, files: str) -> int:
    """The shared frame of `offsets` and `bound`: build the untrained model of the command line's
    options and its random-token pairs, run ``job(model, pairs, meta) -> summary``, print
    ``report(summary)`` and where the files went."""
    from flax import nnx  # deferred: `nohair --help` should not pay for importing JAX

    from nohair_jax.model import Transformer
    from nohair_jax.pairs import random_prompt_pairs

    cfg = _model_config(args, args.prompt_len + args.length)
    model = Transformer(cfg, rngs=nnx.Rngs(args.seed))
    pairs = random_prompt_pairs(args.pair_seed, args.pairs, args.prompt_len, args.length, cfg.vocab_size)
    start = time.perf_counter()
    print(f"{doing} {args.pairs} pairs, P = {args.prompt_len}, T = {args.length}, {cfg.n_layers} layers, "
          f"d_model {cfg.d_model}, {cfg.position} positions, {cfg.norm_placement}-LN", flush=True)
    meta = dict(command=args.command, init_seed=args.seed, pair_seed=args.pair_seed, pairs="random tokens")
    print(report(job(model, pairs, meta)))
    print(f"\nwrote {args.out}/{files} in {time.perf_counter() - start:.1f} s")
    return 0


def cmd_offsets(args) -> int:
    from nohair_jax.measure import measure_model

    def job(model, pairs, meta):
        fit_kwargs = dict(t_min=args.fit_t_min, n_boot=args.n_boot)
        return measure_model(model, pairs, args.out, float64=args.float64, fit_kwargs=fit_kwargs, meta=meta)

    return _on_untrained_model(args, "measuring", job, _fits_table, "offsets.npz, fit.json, offsets.png")


def cmd_bound(args) -> int:
    from nohair_jax.bound import check_bound, report

    def job(model, pairs, meta):
        return check_bound(model, pairs, args.out, n_boot=args.n_boot, meta=meta)

    return _on_untrained_model(args, "checking the bound on", job, report, "bound.npz, bound.json, bound.png")


def cmd_train(args) -> int:
    from nohair_jax.data import heldout_prompt_pairs, load_corpus, markov_corpus, stdlib_corpus
    from nohair_jax.train import TrainConfig, alpha_history, offsets_callback, train

    if args.corpus and args.markov:
        raise ValueError("give --corpus FILE or --markov, not both")
    corpus = load_corpus(args.corpus) if args.corpus else markov_corpus(args.seed) if args.markov else stdlib_corpus()
    model_cfg = _model_config(args, args.context if args.position != "learned" else max(args.context, args.prompt_len + args.length))
    train_cfg = TrainConfig(
        steps=args.steps, batch_size=args.batch_size, context=args.context, lr=args.lr,
        warmup_steps=min(args.warmup, args.steps - 1), seed=args.seed,
        eval_every=args.eval_every, checkpoint_every=args.checkpoint_every, log_every=args.log_every,
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
        print("alpha per layer (t in [32, T], mean over pairs) against training step:")
        for step, row in zip(steps, alpha):
            print(f"  step {step:>6}: " + ", ".join(f"{a:.3f}" for a in row))
    print(f"wrote {args.out}/config.json, history.json, checkpoints/")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nohair", description="How long does a prompt keep steering a transformer?")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("offsets", help="measure prompt-pair offsets of an untrained model and fit alpha per layer")
    _add_model_args(p, title="model (untrained, random init)", position="learned")
    g = p.add_argument_group("measurement")
    _add_pair_args(g, length=2048, pairs=16)
    g.add_argument("--float64", action="store_true", help="measure in float64 (no float32 noise floor)")
    g.add_argument("--fit-t-min", type=_positive_int, default=32, help="start of the fit window (default 32)")
    g.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples for the interval (default 1000)")
    g.add_argument("--out", default="results/offsets", help="output folder (default results/offsets)")
    p.set_defaults(func=cmd_offsets)

    p = sub.add_parser("bound", help="measure the no-hair bound's conditions on an untrained model and check the bound")
    _add_model_args(p, title="model (untrained, random init)", position="learned")
    g = p.add_argument_group("measurement")
    _add_pair_args(g, length=512, pairs=8)
    g.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples for the shape check (default 1000)")
    g.add_argument("--out", default="results/bound", help="output folder (default results/bound)")
    p.set_defaults(func=cmd_bound)

    p = sub.add_parser("train", help="train a byte-level model with checkpoints; optionally measure alpha while training")
    _add_model_args(p, title="model", position="rope")
    g = p.add_argument_group("training")
    g.add_argument("--corpus", default=None, metavar="FILE", help="UTF-8 text to train on (default: the embedded stdlib corpus)")
    g.add_argument("--markov", action="store_true", help="train on the synthetic Markov-chain languages instead")
    g.add_argument("--steps", type=_positive_int, default=600, help="optimiser steps (default 600)")
    g.add_argument("--batch-size", type=_positive_int, default=16, help="windows per step (default 16)")
    g.add_argument("--context", type=_positive_int, default=256, help="training context in bytes (default 256)")
    g.add_argument("--lr", type=float, default=2e-3, help="peak learning rate (default 2e-3)")
    g.add_argument("--warmup", type=int, default=100, help="warm-up steps (default 100)")
    g.add_argument("--eval-every", type=_positive_int, default=100, help="held-out evaluation cadence (default 100)")
    g.add_argument("--checkpoint-every", type=_positive_int, default=100, help="checkpoint cadence (default 100)")
    g.add_argument("--log-every", type=_positive_int, default=10, help="loss logging cadence (default 10)")
    g.add_argument("--fresh", action="store_true", help="start over instead of resuming from --out's last checkpoint")
    g.add_argument("--out", default="results/train", help="run folder (default results/train)")
    g = p.add_argument_group("alpha while training (prompt pairs cut from held-out text)")
    g.add_argument("--measure-every", type=int, default=0, metavar="STEPS", help="measure alpha every STEPS steps (default: never)")
    _add_pair_args(g, length=1024, pairs=8)
    p.set_defaults(func=cmd_train)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ValueError as err:  # bad input: one clear line naming the value, not a traceback
        print(f"nohair {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
