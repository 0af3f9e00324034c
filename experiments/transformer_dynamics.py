"""The consensus measures on real transformers' tokens across depth, beside the control threshold.

Each layer's residual stream ``h_l`` (one vector per token of a held-out text window) is read as
the particles of the second paper: normalised to the unit sphere (the theory's idealised layer
norm), its diameter, mean cosine and number of clusters, and raw, its diameter relative to the
mean token norm. The analogue of the control gain against the threshold ``gain > ||V||``: in a
pre-LN block ``h_l = h_(l-1) + a_l + m_l``, the attention output ``a_l`` is the interaction and the
MLP output ``m_l`` the token-wise control of one Euler step. Two ratios per layer are compared
with 1: ``mean |m_i| / mean |a_i|`` (MLP against what attention actually did) and
``mean |m_i| / b_l`` with ``b_l`` the bound on every ``|a_i|`` whatever the queries and keys
(``layer_measures.attention_bound``, the analogue of ``drift_bound``). This is an analogy: an MLP
is not the control ``g (e - x)`` and its output need not point to a common target, so a ratio
above 1 says the MLP is strong enough to override attention, not that it steers to consensus.

Models: a byte-level model trained on the embedded corpus (briefly, or ``--checkpoint-dir`` of a
``nohair train`` / ``experiments/trained_vs_untrained.py`` run, e.g.
``results/trained_vs_untrained/seed0``), the same model at its initialisation, and untrained
models of the default architecture (``model.untrained_model``: learned positions) at a few
depths, all on the same held-out windows.

    python experiments/transformer_dynamics.py --out results/transformer_dynamics   # quick: trains 300 steps
    python experiments/transformer_dynamics.py --checkpoint-dir results/trained_vs_untrained/seed0 --out ...

Writes ``train/`` (when it trains), ``measures.npz`` (every measure per layer and sequence),
``summary.json`` (medians over sequences) and ``transformer_dynamics.png`` drawn from it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from flax import nnx
from matplotlib.figure import Figure

import nohair_jax as nh
from nohair_jax.config import default_config
from nohair_jax.model import untrained_model
from nohair_jax.model import Transformer, TransformerConfig
from nohair_jax.experiments import experiment_parser, parse_experiment_args, write_summary
from nohair_jax.parts import Part
from nohair_jax.results import load_json, save_figure, save_npz
from nohair_jax.layer_measures import layer_measures
from nohair_jax.train import TrainConfig, eval_windows, load_trained, train

PROFILES = {
    "smoke": dict(untrained_depths=(2,), d_model=32, seq_len=32, n_seqs=2, cluster_tol=0.5,
                  train_d_model=32, train_depth=2, train_steps=20, train_batch=2, train_context=32),
    "quick": dict(untrained_depths=(4, 8), d_model=128, seq_len=128, n_seqs=8, cluster_tol=0.5,
                  train_d_model=64, train_depth=4, train_steps=300, train_batch=8, train_context=128),
    "full": dict(untrained_depths=(4, 8, 12), d_model=256, seq_len=256, n_seqs=32, cluster_tol=0.5,
                 train_d_model=256, train_depth=6, train_steps=5000, train_batch=32, train_context=512),
}

PART = Part(order=13, title="Token dynamics in the project's transformers", figures=("transformer_dynamics.png",),
            about="The same consensus measures on the hidden states across depth, trained and untrained, and a gain "
                  "analogue.",
            quick=("quick", dict(train_steps=80, untrained_depths=(4,))),
            # the full profile: the sizes the quick one had before the main job was cut to 15 minutes
            full=("quick", dict(train_steps=150)), seconds=45)

LAYER_MEASURES = ("sphere_diameter", "mean_cosine", "clusters", "relative_diameter", "norm")


def trained_model(p: dict, corpus: nh.Corpus, out: Path, checkpoint_dir: Path | None, seed: int):
    """(trained model, its config, its training seed, held-out bits per byte, steps), training if no checkpoint."""
    if checkpoint_dir is not None:
        saved = load_json(checkpoint_dir / "config.json")
        history = load_json(checkpoint_dir / "history.json")["history"]
        last = [e for e in history if "eval_bits_per_byte" in e][-1]
        return (load_trained(checkpoint_dir), TransformerConfig(**saved["model"]), saved["train"]["seed"],
                last["eval_bits_per_byte"], last["step"])
    cfg = default_config(p["train_depth"], d_model=p["train_d_model"], position="rope")
    result = train(cfg, train_config(p, seed), corpus, out / "train")
    bits = [e["eval_bits_per_byte"] for e in result.history if "eval_bits_per_byte" in e][-1]
    return result.model, cfg, seed, bits, p["train_steps"]


def train_config(p: dict, seed: int) -> TrainConfig:
    """How the model is trained: ``p["train_steps"]`` steps, a tenth of them warmup, logged every 10."""
    steps = p["train_steps"]
    return TrainConfig(steps=steps, batch_size=p["train_batch"], context=p["train_context"], seed=seed,
                       warmup_steps=steps // 10, eval_every=steps, checkpoint_every=steps, log_every=10)


def run(profile: str, out: Path, seed: int = 0, settings: dict | None = None,
        checkpoint_dir: Path | None = None) -> dict:
    """Run the profile (``settings`` override its values), save, draw; returns the summary."""
    p, out = dict(PROFILES[profile], **(settings or {})), Path(out)
    checkpoint_dir = None if checkpoint_dir is None else Path(checkpoint_dir)
    corpus = nh.stdlib_corpus()
    tokens = eval_windows(corpus.heldout, p["seq_len"], p["n_seqs"])[:, : p["seq_len"]]  # [B, T] held-out bytes
    trained, cfg, train_seed, bits, steps = trained_model(p, corpus, out, checkpoint_dir, seed)
    models = [("trained", f"trained ({steps} steps, {bits:.2f} bits/byte)", trained),
              ("init", "the same model at initialisation", Transformer(cfg, rngs=nnx.Rngs(train_seed)))]
    models += [(f"untrained_L{depth}", f"untrained, {depth} layers, learned positions",
                untrained_model(depth, d_model=p["d_model"], max_len=p["seq_len"], seed=seed))
               for depth in p["untrained_depths"]]
    arrays, rows = {}, []
    for key, label, model in models:
        m = layer_measures(model, tokens, tol=p["cluster_tol"])
        arrays.update({f"{key}__{name}": v for name, v in m.items()})
        rows.append(dict(key=key, label=label, model=model.config.to_dict(), **medians(m)))
        print(f"{label}: measured", flush=True)
    save_npz(out / "measures.npz", **arrays)
    summary = dict(profile=profile, settings=dict(p, seed=seed),
                   checkpoint_dir=None if checkpoint_dir is None else str(checkpoint_dir),
                   tokens=f"{p['n_seqs']} held-out windows of {p['seq_len']} bytes ({corpus.name})", rows=rows,
                   threshold_analogue="mean MLP output norm over mean attention output norm, or over the attention "
                                      "bound b_l; theory: gain > ||V||; an analogy, not the theorem")
    return write_summary(out, summary, draw)


def medians(m: dict[str, np.ndarray]) -> dict[str, list[float]]:
    """Medians over sequences: each layer measure ``[L+1]`` (embedding, then layers 1..L) and the two
    ratios ``[L]`` (layers 1..L), each ratio taken per sequence first."""
    out = {name: np.median(m[name], axis=-1).tolist() for name in LAYER_MEASURES}
    out["mlp_over_attn"] = np.median(m["mlp_norm"] / m["attn_norm"], axis=-1).tolist()
    out["mlp_over_attn_bound"] = np.median(m["mlp_norm"] / m["attn_bound"], axis=-1).tolist()
    return out


def draw(out: Path) -> None:
    summary = load_json(out / "summary.json")
    p = summary["settings"]
    fig = Figure(figsize=(15, 8))
    axes = fig.subplots(2, 3).ravel()
    panels = [("sphere_diameter", "diameter on the sphere (x / |x|)"), ("mean_cosine", "mean cosine"),
              ("clusters", f"clusters on the sphere at {p['cluster_tol']}"),
              ("relative_diameter", "raw diameter / mean norm"),
              ("mlp_over_attn", "mean |MLP out| / mean |attention out|"),
              ("mlp_over_attn_bound", "mean |MLP out| / attention bound b_l")]
    for i, row in enumerate(summary["rows"]):
        style = dict(trained="o-", init="s--").get(row["key"], "^:")
        for ax, (name, _) in zip(axes, panels):
            values = row[name]
            layers = np.arange(len(values)) + (1 if name.startswith("mlp") else 0)
            ax.plot(layers, values, style, color=f"C{i}", label=row["label"], ms=4)
    for ax, (name, title) in zip(axes, panels):
        ax.set(xlabel="layer (0 = embedding)", title=title)
        if name.startswith("mlp"):
            ax.axhline(1, color="k", lw=1, ls="-.", label="threshold analogue: gain = drift bound")
            ax.set_yscale("log")
    axes[0].legend(fontsize=7)
    axes[5].legend(fontsize=7)
    fig.suptitle(f"tokens of {summary['tokens']}: medians over sequences")
    fig.tight_layout()
    save_figure(out / "transformer_dynamics.png", fig)


def main() -> None:
    parser = experiment_parser(__doc__, "transformer_dynamics", PROFILES)
    parser.add_argument("--checkpoint-dir", type=Path, default=None,
                        help="a training run folder to load the trained model from instead of training one")
    args = parse_experiment_args(parser)
    summary = run(args.profile, args.out, args.seed, checkpoint_dir=args.checkpoint_dir)
    for row in summary["rows"]:
        print(f"\n{row['label']}")
        print(f"{'layer':>5}  {'mean cos':>8}  {'sphere diam':>11}  {'clusters':>8}  {'raw diam/norm':>13}  "
              f"{'MLP/attn':>8}  {'MLP/bound':>9}")
        for layer in range(len(row["mean_cosine"])):
            ratios = ("-", "-") if layer == 0 else (f"{row['mlp_over_attn'][layer - 1]:.2f}",
                                                    f"{row['mlp_over_attn_bound'][layer - 1]:.2f}")
            print(f"{layer:>5}  {row['mean_cosine'][layer]:>8.3f}  {row['sphere_diameter'][layer]:>11.3f}  "
                  f"{row['clusters'][layer]:>8.1f}  {row['relative_diameter'][layer]:>13.3f}  {ratios[0]:>8}  {ratios[1]:>9}")


if __name__ == "__main__":
    main()
