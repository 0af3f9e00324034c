"""Offsets throughput against TransformerLens, same architecture, same weights, same pairs, one run.

TransformerLens is what most people would reach for to read residual streams. Here it gets its
best shot on this CPU: version 4's ``TransformerBridge.boot_transformers(folder, hf_model=...,
tokenizer=...)`` over a random-weight transformers ``GPT2LMHeadModel``, ``run_with_cache``
filtered to the residual-stream hooks (``blocks.0.hook_resid_pre`` and every
``blocks.l.hook_resid_post``), the per-layer l2 offsets computed in torch under
``torch.inference_mode()``. Its settings are chosen by a trial on the first few pairs: torch
threads (the core count, or 1: on a loaded shared machine OpenMP with every core can be several
times slower than one thread) and pairs per batch (one pair: its two sequences in one batch; or k
pairs in one batch); only the fastest is timed and compared against.

Against it, in the same process and interleaved repeat by repeat:
  * ``nohair_jax.prompt_pair_offsets`` at default settings (and other ``pairs_per_call``), on the
    same weights: the folder the transformers model was saved to, read back with
    ``nohair_jax.checkpoints.load_checkpoint``; it computes more than TransformerLens does here
    (relative offsets, norms, KL);
  * a plain jitted JAX forward of both sequences of each pair (the two passes that
    ``pair_offsets`` runs, without the offset and KL arithmetic): the floor.

Before timing, the offsets of the two tools are compared on every pair (this is what makes the
comparison apples to apples). Nothing is downloaded: the tokenizer the bridge needs is a
byte-level BPE trained here in a second or two on Python's pydoc topics, saved next to the model
with ``save_pretrained`` and loaded back from that folder; hub access is switched off.

Tokens per second count both sequences of a pair (2 * n_pairs * (P + T)). The first call of each
variant (compilation for JAX, first-touch allocations for torch) is reported as warm-up, apart from
the steady state: the median of ``--repeats`` timed runs.

Needs the bench extra (``pip install -e '.[bench]'``, see ``make bench-tl``):

    python benchmarks/transformerlens.py            # d_model 256, 4 layers: T 1024 x 32 pairs, T 8192 x 1 pair
    python benchmarks/transformerlens.py --quick    # tiny sizes, a smoke run of a minute
    python benchmarks/transformerlens.py --shapes 1024:32 --repeats 5

T 8192 runs one pair by default: on 2 shared cores TransformerLens takes minutes per pair there
and about 12 GB of memory (eager attention, [2, heads, S, S] scores and weights per layer).
"""

from __future__ import annotations

import os

# No hub, ever: everything below is built and loaded from local folders.
for _flag in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
    os.environ.setdefault(_flag, "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse
import dataclasses
import importlib.metadata
import logging
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import flax
import jax
import numpy as np
import torch
import transformers
from flax import nnx

import nohair_jax as nh
from nohair_jax.checkpoints import load_checkpoint

TARGETS = {1024: 3.0, 8192: 10.0}  # issue 5: nohair / TransformerLens throughput at these T
ATTENTION_BUDGET = 3 * 2**30  # bytes of float32 [batch, heads, S, S] attention weights one call may hold
# (larger batchings are skipped: TransformerLens keeps several such tensors alive per layer)


@dataclasses.dataclass(frozen=True)
class Shape:
    d_model: int
    n_layers: int
    n_heads: int
    vocab: int
    prompt_len: int
    length: int
    n_pairs: int

    @property
    def seq(self) -> int:
        return self.prompt_len + self.length

    @property
    def tokens(self) -> int:
        """Tokens of one pass over all pairs, both sequences of a pair counted."""
        return 2 * self.n_pairs * self.seq

    def attention_bytes(self, sequences: int) -> int:
        return 4 * sequences * self.n_heads * self.seq**2

    @property
    def useful_flops(self) -> float:
        """FLOPs of one pass over all pairs that any implementation must do: the weight matrix
        products, the causal half of q.k and weights.v, and the logits (which nohair needs for KL)."""
        s, d, L = self.seq, self.d_model, self.n_layers
        per_sequence = 2 * s * L * 12 * d * d + 2 * L * d * s * (s + 1) + 2 * s * d * self.vocab
        return 2 * self.n_pairs * per_sequence


# ---------------------------------------------------------------------------------------------
# A tokenizer and a random GPT-2, saved to a folder and read back from it by both tools.


def train_tokenizer(vocab: int):
    """A GPT-2-like byte-level BPE of exactly ``vocab`` tokens, trained on Python's pydoc topics."""
    from pydoc_data.topics import topics
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab, special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tok.train_from_iterator([topics[k] for k in sorted(topics)], trainer)
    if tok.get_vocab_size() != vocab:
        raise RuntimeError(f"the BPE reached {tok.get_vocab_size()} tokens, not {vocab}: train it on more text")
    end = "<|endoftext|>"
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=end, eos_token=end, unk_token=end)


def make_folder(shape: Shape, fast_tokenizer, seed: int, root: Path):
    """Save a random-weight GPT2LMHeadModel and the tokenizer to a folder; returns (folder, model, tokenizer)."""
    folder = root / f"gpt2_d{shape.d_model}_L{shape.n_layers}_S{shape.seq}"
    cfg = transformers.GPT2Config(
        vocab_size=shape.vocab, n_positions=shape.seq, n_embd=shape.d_model, n_layer=shape.n_layers,
        n_head=shape.n_heads, activation_function="gelu_new", bos_token_id=0, eos_token_id=0,
    )
    torch.manual_seed(seed)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    model.save_pretrained(folder)
    fast_tokenizer.save_pretrained(folder)
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)  # loaded back: no download
    if len(tokenizer) != shape.vocab:
        raise RuntimeError(f"tokenizer has {len(tokenizer)} tokens, the model {shape.vocab}")
    return folder, model, tokenizer


def boot_bridge(folder: Path, hf_model, tokenizer):
    from transformer_lens.model_bridge import TransformerBridge

    import transformer_lens.model_bridge.sources.transformers  # noqa: F401  attaches boot_transformers

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bridge = TransformerBridge.boot_transformers(str(folder), hf_model=hf_model, tokenizer=tokenizer, device="cpu")
    bridge.eval()
    return bridge


# ---------------------------------------------------------------------------------------------
# The three contestants. Each returns l2 offsets [n_pairs, L+1, T] as numpy (the floor: None).


def tl_offsets(bridge, names: list[str], pairs, pairs_per_batch: int) -> np.ndarray:
    """TransformerLens as its users would write it: run_with_cache on both sequences, l2 in torch."""
    a, b, c = (torch.from_numpy(np.asarray(x, np.int64)) for x in pairs)
    n, p = a.shape
    out = []
    with torch.inference_mode():
        for s in range(0, n, pairs_per_batch):
            ta = torch.cat([a[s : s + pairs_per_batch], c[s : s + pairs_per_batch]], dim=1)
            tb = torch.cat([b[s : s + pairs_per_batch], c[s : s + pairs_per_batch]], dim=1)
            k = ta.shape[0]
            _, cache = bridge.run_with_cache(torch.cat([ta, tb]), names_filter=names, return_cache_object=False)
            h = torch.stack([cache[name][:, p:] for name in names])  # [L+1, 2k, T, D]
            out.append(torch.linalg.vector_norm(h[:, :k] - h[:, k:], dim=-1).transpose(0, 1))  # [k, L+1, T]
    return torch.cat(out).numpy()


def nohair_offsets(model, pairs, pairs_per_call: int) -> np.ndarray:
    return nh.prompt_pair_offsets(model, *pairs, pairs_per_call=pairs_per_call).l2


def jax_floor(model):
    """The forward passes alone: both sequences of a pair in one jitted call, as ``pair_offsets``
    runs them (two [1, S] passes), with no offset or KL arithmetic. The residual streams come back
    to the host as the offsets do; the logits are reduced on the device (a max over the vocabulary)
    so that the unembedding is computed but no [S, vocab] array is written out."""
    graphdef, state = nnx.split(model)

    def forward(state, tokens_a, tokens_b):
        model = nnx.merge(graphdef, state)
        return [(out.hidden, out.logits.max(-1)) for out in (model(tokens_a), model(tokens_b))]

    forward = jax.jit(forward)

    def run(pairs):
        a, b, c = (np.asarray(x, np.int32) for x in pairs)
        with jax.default_matmul_precision("highest"):
            for i in range(a.shape[0]):
                out = forward(state, np.concatenate([a[i], c[i]])[None], np.concatenate([b[i], c[i]])[None])
                jax.tree_util.tree_map(np.asarray, out)

    return run


# ---------------------------------------------------------------------------------------------


def attention_path(model, shape: Shape) -> str:
    """Which attention the project's model runs at this length (it gained a blockwise path in issue 5)."""
    attn = model.blocks[0].attn
    implementation = getattr(attn, "implementation", None)
    if implementation is None:
        return "plain (the only one)"
    try:
        from nohair_jax.attention import use_blockwise

        chosen = "blockwise" if use_blockwise(implementation, shape.seq, False) else "plain"
    except ImportError:
        chosen = "?"
    block = getattr(attn, "block_size", None)
    return f"{implementation!r} -> {chosen}" + (f" (block {block})" if chosen == "blockwise" else "")


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def agreement(ref: np.ndarray, other: np.ndarray) -> dict:
    """How far two l2 offset arrays [n, L+1, T] are apart, relative to the offsets' size.

    ``scaled``: max |diff| / max |ref| per layer, worst layer (layer 0 is exactly 0 in both: the
    continuation tokens and positions are shared). ``elementwise``: max |diff| / |ref| over the
    entries above 1 % of their layer's largest offset.
    """
    diff = np.abs(other - ref)
    scale = np.abs(ref).max(axis=(0, 2), keepdims=True)  # [1, L+1, 1]
    live = scale[0, :, 0] > 0
    scaled = float((diff.max(axis=(0, 2))[live] / scale[0, live, 0]).max()) if live.any() else float(diff.max())
    big = np.abs(ref) > 0.01 * scale
    elementwise = float((diff[big] / np.abs(ref[big])).max()) if big.any() else 0.0
    return dict(scaled=scaled, elementwise=elementwise, max_abs=float(diff.max()), layer0_max=float(np.abs(other[:, 0]).max()))


def fits(shape: Shape, sequences_per_call: int) -> bool:
    return shape.attention_bytes(sequences_per_call) <= ATTENTION_BUDGET


def run_shape(shape: Shape, args, fast_tokenizer, root: Path) -> list[dict]:
    print(
        f"\n=== d_model {shape.d_model}, {shape.n_layers} layers, {shape.n_heads} heads, vocab {shape.vocab}, "
        f"P {shape.prompt_len}, T {shape.length}, {shape.n_pairs} pairs ({shape.tokens} tokens a pass) ===",
        flush=True,
    )
    seconds, (folder, hf_model, tokenizer) = timed(lambda: make_folder(shape, fast_tokenizer, args.seed, root))
    print(f"  random GPT2LMHeadModel saved with its tokenizer to {folder.name} ({seconds:.1f} s)")
    seconds, bridge = timed(lambda: boot_bridge(folder, hf_model, tokenizer))
    print(f"  TransformerBridge.boot_transformers: {seconds:.1f} s")
    seconds, (model, _) = timed(lambda: load_checkpoint(folder, seq_len=shape.seq))
    print(f"  nohair model from the same weights by load_checkpoint: {seconds:.1f} s; attention: {attention_path(model, shape)}")
    pairs = nh.random_prompt_pairs(args.seed, shape.n_pairs, shape.prompt_len, shape.length, shape.vocab)
    names = ["blocks.0.hook_resid_pre"] + [f"blocks.{i}.hook_resid_post" for i in range(shape.n_layers)]

    # TransformerLens gets its fastest settings: every (torch threads, pairs per batch) candidate is
    # timed on the first few pairs (after one warm-up call each) and only the winner is timed below.
    candidates = sorted({
        (threads, min(k, shape.n_pairs))
        for threads in (args.torch_threads or [os.cpu_count(), 1])
        for k in args.tl_batches
        if fits(shape, 2 * min(k, shape.n_pairs))
    })
    if len(candidates) > 1:
        subset_n = max(k for _, k in candidates)
        subset = tuple(x[:subset_n] for x in pairs)
        trial = {}
        for phase in ("warm-up", "timed"):
            for threads, k in candidates:
                torch.set_num_threads(threads)
                trial[threads, k] = timed(lambda: tl_offsets(bridge, names, subset, k))[0]
        for (threads, k), seconds in trial.items():
            rate = 2 * subset_n * shape.seq / seconds
            print(f"  TransformerLens trial on {subset_n} pairs: {threads} torch thread(s), {k} pair(s)/batch: {rate:.0f} tokens/s")
        threads, tl_k = min(trial, key=trial.get)
    else:
        threads, tl_k = candidates[0]
    if args.torch_threads is None:
        args.torch_threads = [threads]  # later shapes reuse this shape's choice of threads
    print(f"  TransformerLens runs with {threads} torch thread(s), {tl_k} pair(s) per batch")

    def run_tl():
        torch.set_num_threads(threads)
        return tl_offsets(bridge, names, pairs, tl_k)

    variants = [(f"TransformerLens ({tl_k} pair/batch, {threads} thread)", "tl", run_tl)]  # (label, tool, fn)
    for k in args.pairs_per_call:
        k = min(k, shape.n_pairs)
        if fits(shape, k) and all(v[0] != f"nohair, pairs_per_call={k}" for v in variants):
            variants.append((f"nohair, pairs_per_call={k}", "nohair", lambda k=k: nohair_offsets(model, pairs, k)))
    floor = jax_floor(model)
    variants.append(("plain jitted JAX forward", "floor", lambda: floor(pairs)))

    # Warm-up: the first call of each variant, also the offsets compared for agreement.
    warm, results = {}, {}
    for label, _, fn in variants:
        warm[label], results[label] = timed(fn)
        print(f"  warm-up {label}: {warm[label]:.1f} s", flush=True)
    tl_label = next(label for label, tool, _ in variants if tool == "tl")
    nh_label = next(label for label, tool, _ in variants if tool == "nohair")
    agree = agreement(results[nh_label], results[tl_label])
    print(
        f"  agreement TransformerLens vs nohair l2 offsets ({tl_label} vs {nh_label}): "
        f"max |diff| / max offset (worst layer) {agree['scaled']:.2e}, max elementwise relative difference "
        f"(entries above 1 % of their layer's max) {agree['elementwise']:.2e}, layer-0 max {agree['layer0_max']:.1e}"
    )
    for label, tool, _ in variants:  # every nohair chunking gives the same offsets
        if tool != "floor" and label not in (tl_label, nh_label):
            ref = results[nh_label] if tool == "nohair" else results[tl_label]
            print(f"    {label} vs its default: max |diff| / max offset {agreement(ref, results[label])['scaled']:.1e}")

    # Steady state: interleaved repeats, the order rotated each round so no variant always goes first.
    times = {label: [] for label, _, _ in variants}
    for r in range(args.repeats):
        order = variants[r % len(variants) :] + variants[: r % len(variants)]
        for label, _, fn in order:
            times[label].append(timed(fn)[0])
        print(f"  repeat {r + 1}/{args.repeats}: " + ", ".join(f"{t[-1]:.1f}" for t in times.values()) + " s", flush=True)

    rows = []
    for label, tool, _ in variants:
        median = statistics.median(times[label])
        rows.append(dict(
            shape=shape, label=label, tool=tool, seconds=median, spread=(min(times[label]), max(times[label])),
            warmup=warm[label], tokens_per_s=shape.tokens / median, agreement=agree,
        ))
    del bridge, hf_model, model
    return rows


def print_table(rows: list[dict]) -> None:
    print("\nTokens per second (both sequences of a pair counted), median of the timed repeats:\n")
    print("| d_model | T | pairs | variant | tokens/s | useful GFLOP/s | median s (min-max) | warm-up s | vs TL |")
    print("|---|---|---|---|---|---|---|---|---|")
    for length in sorted({r["shape"].length for r in rows}):
        group = [r for r in rows if r["shape"].length == length]
        best_tl = max(r["tokens_per_s"] for r in group if r["tool"] == "tl")
        for r in group:
            s = r["shape"]
            lo, hi = r["spread"]
            print(
                f"| {s.d_model} | {s.length} | {s.n_pairs} | {r['label']} | {r['tokens_per_s']:.0f} | "
                f"{s.useful_flops / r['seconds'] / 1e9:.1f} | "
                f"{r['seconds']:.2f} ({lo:.2f}-{hi:.2f}) | {r['warmup']:.1f} | {r['tokens_per_s'] / best_tl:.2f}x |"
            )
    print("\nWarm-up: the first call on all pairs (JAX: with compilation); TransformerLens's comes after its settings trial.")
    print("Useful GFLOP/s: weight matmuls, the causal half of attention and the logits, per second (the same count for all).")
    print("\nAgainst the targets (nohair at default settings / the fastest TransformerLens batching):\n")
    for length in sorted({r["shape"].length for r in rows}):
        group = [r for r in rows if r["shape"].length == length]
        best_tl = max((r for r in group if r["tool"] == "tl"), key=lambda r: r["tokens_per_s"])
        default = next(r for r in group if r["label"] == "nohair, pairs_per_call=1")
        best_nh = max((r for r in group if r["tool"] == "nohair"), key=lambda r: r["tokens_per_s"])
        floor = next(r for r in group if r["tool"] == "floor")
        ratio = default["tokens_per_s"] / best_tl["tokens_per_s"]
        target = TARGETS.get(length)
        verdict = "" if target is None else f" (target {target:.0f}x: {'met' if ratio >= target else 'NOT met'})"
        print(
            f"  T {length}: nohair default {ratio:.2f}x TransformerLens{verdict}; best nohair "
            f"({best_nh['label']}) {best_nh['tokens_per_s'] / best_tl['tokens_per_s']:.2f}x; plain JAX forward "
            f"{floor['tokens_per_s'] / best_tl['tokens_per_s']:.2f}x; nohair default at "
            f"{default['tokens_per_s'] / floor['tokens_per_s']:.0%} of the plain forward; agreement "
            f"{default['agreement']['scaled']:.1e}"
        )


def parse_shapes(text: str) -> list[tuple[int, int]]:
    return [tuple(int(x) for x in item.split(":")) for item in text.split(",")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes (d_model 64, T 128 and 256), for a smoke run")
    parser.add_argument("--shapes", default="1024:32,8192:1", help="T:n_pairs,... (default %(default)s)")
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--prompt-len", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per variant after the warm-up")
    parser.add_argument("--tl-batches", default="1,4", help="pairs per TransformerLens batch to try (default %(default)s)")
    parser.add_argument("--torch-threads", default=None,
                        help="torch thread counts to try for TransformerLens, e.g. 2,1 (default: the core count and 1, "
                             "tried at the first shape and kept for the others)")
    parser.add_argument("--pairs-per-call", default="1,2,4", help="nohair pairs_per_call to try; 1 is the default")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    args.tl_batches = [int(x) for x in args.tl_batches.split(",")]
    args.torch_threads = None if args.torch_threads is None else [int(x) for x in args.torch_threads.split(",")]
    args.pairs_per_call = sorted({1, *(int(x) for x in args.pairs_per_call.split(","))})
    if args.quick:
        args.shapes, args.d_model, args.vocab, args.repeats = "128:4,256:2", 64, 512, 2
    shapes = [
        Shape(args.d_model, args.layers, args.heads, args.vocab, args.prompt_len, length, n_pairs)
        for length, n_pairs in parse_shapes(args.shapes)
    ]

    logging.getLogger("transformers").setLevel(logging.ERROR)
    versions = (
        f"python {sys.version.split()[0]}, torch {torch.__version__}, transformers {transformers.__version__}, "
        f"transformer-lens {importlib.metadata.version('transformer-lens')}, jax {jax.__version__}, "
        f"flax {flax.__version__}"
    )
    print(versions)
    print(f"{os.cpu_count()} CPU cores, jax on {jax.devices()[0].platform}")
    seconds, fast_tokenizer = timed(lambda: train_tokenizer(args.vocab))
    print(f"byte-level BPE tokenizer of {args.vocab} tokens trained in {seconds:.1f} s")

    rows = []
    with tempfile.TemporaryDirectory(prefix="nohair_tl_") as root:
        for shape in shapes:
            rows += run_shape(shape, args, fast_tokenizer, Path(root))
    print_table(rows)


if __name__ == "__main__":
    main()
