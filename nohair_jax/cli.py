"""The ``nohair`` command line.

``nohair offsets``: build an (untrained) model, measure prompt-pair offsets on random token
pairs, fit alpha per layer above the measured noise floor, print the table, write
``offsets.npz``, ``fit.json`` and ``offsets.png``.
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


def _add_model_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model (untrained, random init)")
    g.add_argument("--depth", type=_positive_int, default=4, help="number of layers L (default 4)")
    g.add_argument("--d-model", type=_positive_int, default=128, help="width (default 128)")
    g.add_argument("--heads", type=_positive_int, default=4, help="attention heads (default 4)")
    g.add_argument("--kv-heads", type=_positive_int, default=None, help="key/value heads (default: as many as heads)")
    g.add_argument("--mlp", choices=MLP_KINDS, default="gelu")
    g.add_argument("--norm", choices=NORM_KINDS, default="layernorm")
    g.add_argument("--norm-placement", choices=NORM_PLACEMENTS, default="pre")
    g.add_argument("--position", choices=POSITION_KINDS, default="learned", help="position encoding (default learned)")
    g.add_argument("--logit-bias", type=float, default=None, metavar="GAMMA",
                   help="add the dilution-cancelling prompt logit bias with strength GAMMA (DESIGN.md section 4)")
    g.add_argument("--seed", type=int, default=0, help="parameter initialisation seed (default 0)")


def _model_config(args, total_len: int) -> TransformerConfig:
    bias = None if args.logit_bias is None else PromptLogitBias(args.prompt_len, args.logit_bias)
    return TransformerConfig(
        d_model=args.d_model, n_heads=args.heads, n_kv_heads=args.kv_heads, n_layers=args.depth, mlp=args.mlp,
        norm=args.norm, norm_placement=args.norm_placement, position=args.position, max_len=total_len,
        prompt_logit_bias=bias,
    )


def _print_fits(summary: dict) -> None:
    print(f"\nalpha per layer (fit window and {summary['fits'][0].get('confidence', 0.95):.0%} bootstrap interval over pairs)")
    print(f"{'layer':>5}  {'alpha':>6}  {'interval':>15}  {'R^2':>6}  {'window t':>12}  {'floor at t':>10}")
    for layer, fit in enumerate(summary["fits"], start=1):
        if "error" in fit:
            print(f"{layer:>5}  no fit: {fit['error']}")
            continue
        lo, hi = fit["ci"] if None not in fit["ci"] else (float("nan"), float("nan"))
        floor = "-" if fit["floor_t"] is None else str(fit["floor_t"])
        window = f"{fit['t_range'][0]}-{fit['t_range'][1]}"
        print(f"{layer:>5}  {fit['alpha']:6.3f}  [{lo:6.3f}, {hi:6.3f}]  {fit['r2']:6.3f}  {window:>12}  {floor:>10}")


def cmd_offsets(args) -> int:
    from flax import nnx  # deferred: `nohair --help` should not pay for importing JAX

    from nohair_jax.measure import measure_model
    from nohair_jax.model import Transformer
    from nohair_jax.pairs import random_prompt_pairs

    cfg = _model_config(args, args.prompt_len + args.length)
    model = Transformer(cfg, rngs=nnx.Rngs(args.seed))
    pairs = random_prompt_pairs(args.pair_seed, args.pairs, args.prompt_len, args.length, cfg.vocab_size)
    start = time.perf_counter()
    print(f"measuring {args.pairs} pairs, P = {args.prompt_len}, T = {args.length}, "
          f"{cfg.n_layers} layers, d_model {cfg.d_model}, {cfg.position} positions", flush=True)
    summary = measure_model(
        model, pairs, args.out, float64=args.float64,
        fit_kwargs=dict(t_min=args.fit_t_min, n_boot=args.n_boot),
        meta=dict(command="offsets", init_seed=args.seed, pair_seed=args.pair_seed, pairs="random tokens"),
    )
    _print_fits(summary)
    print(f"\nwrote {args.out}/offsets.npz, fit.json, offsets.png in {time.perf_counter() - start:.1f} s")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nohair", description="How long does a prompt keep steering a transformer?")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("offsets", help="measure prompt-pair offsets of an untrained model and fit alpha per layer")
    _add_model_args(p)
    g = p.add_argument_group("measurement")
    g.add_argument("--prompt-len", type=_positive_int, default=16, help="prompt length P in tokens (default 16)")
    g.add_argument("--length", type=_positive_int, default=2048, help="continuation length T in tokens (default 2048)")
    g.add_argument("--pairs", type=_positive_int, default=16, help="number of random prompt pairs (default 16)")
    g.add_argument("--pair-seed", type=int, default=1, help="seed of the random token pairs (default 1)")
    g.add_argument("--float64", action="store_true", help="measure in float64 (no float32 noise floor)")
    g.add_argument("--fit-t-min", type=_positive_int, default=32, help="start of the fit window (default 32)")
    g.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples for the interval (default 1000)")
    g.add_argument("--out", default="results/offsets", help="output folder (default results/offsets)")
    p.set_defaults(func=cmd_offsets)
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
