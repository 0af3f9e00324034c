"""Writing GGUF files as llama.cpp's converter (convert_hf_to_gguf.py) writes them, for the tests.

From a tiny transformers model (or for a tokenizer alone): tensor names from llama.cpp's own map
(``gguf.get_tensor_name_map``), what the converter changes done here as it does it (Llama's q and k
rows permuted, Gemma's norm weights stored as 1 + w, GPT-NeoX's fused q, k, v reordered to all of q,
then k, then v), the metadata keys it writes for each family, and a tokenizer of either kind: a tiny
byte-level BPE (``byte_vocab``) or a tiny SentencePiece vocabulary (``sentencepiece_vocab``).
"""

from __future__ import annotations

import math
import zlib
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, BYTE = 1, 2, 3, 4, 6  # llama.cpp's token types


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table: printable Latin-1 bytes stand for themselves,
    the others are moved to U+0100 on (so a space is "Ġ", a newline "Ċ")."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, moved = {}, 0
    for b in range(256):
        if b in kept:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + moved)
            moved += 1
    return table


# A few merges, chosen so that the splits differ: digit runs (gpt2 keeps " 1234" whole, llama3
# cuts runs of 3, qwen2 and smollm single digits), spaces before digits, newlines, "'s".
BYTE_MERGES = ("Ġ t", "h e", "Ġt he", "i n", "Ġ a", "e r", "Ġ Ġ", "ĠĠ Ġ", "Ċ Ċ", "' s", "1 2", "12 3", "123 4", "Ġ 1")
CONTROL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


def byte_vocab() -> tuple[list[str], list[str], list[int]]:
    """(tokens, merges, token types) of a tiny byte-level BPE: the 256 byte characters (id = byte),
    one token per merge, then the control tokens."""
    chars = bytes_to_unicode()
    tokens = [chars[b] for b in range(256)] + [m.replace(" ", "") for m in BYTE_MERGES] + list(CONTROL_TOKENS)
    types = [NORMAL] * (len(tokens) - len(CONTROL_TOKENS)) + [CONTROL] * len(CONTROL_TOKENS)
    return tokens, list(BYTE_MERGES), types


VOCAB_SIZE = len(byte_vocab()[0])
# The architectures whose llama.cpp files carry a SentencePiece tokenizer (the others: byte-level BPE).
SENTENCEPIECE_ARCHITECTURES = ("phi3", "gemma2", "gemma3")

# A tiny SentencePiece vocabulary: <unk>, <s>, </s>, the 256 byte pieces, single characters, pieces of
# two to five characters (so merges compete), two control tokens and one user-defined.
SP_CHARS = "▁abcdehilnorstuwTI0123.,'"
SP_PIECES = ("▁t", "he", "▁th", "▁the", "in", "▁in", "er", "▁a", "an", "▁an", "nd", "▁and", "12", "123", "▁1", "re",
             "▁re", "at", "on", "▁▁", "▁▁▁▁", "is", "▁is", "it", "▁it", "st", "▁st", "es", "ed", "▁w", "ou", "ow", "▁T",
             "IT", "'s", "he▁", "the", "ther", "▁ther")
SP_SPECIAL = (("<start_of_turn>", CONTROL), ("<end_of_turn>", CONTROL), ("<mask>", USER_DEFINED))


def sentencepiece_vocab(scores: str = "random") -> tuple[list[str], list[float], list[int]]:
    """(tokens, scores, token types). ``scores``: "random" (distinct, in no order of the ids: a reader that
    ranks merges by position instead of score gets other tokens) or "position" (-id, Gemma's files)."""
    tokens = ["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256)), *SP_CHARS, *SP_PIECES,
              *(tok for tok, _ in SP_SPECIAL)]
    types = [UNKNOWN, CONTROL, CONTROL] + [BYTE] * 256 + [NORMAL] * (len(SP_CHARS) + len(SP_PIECES))
    types += [kind for _, kind in SP_SPECIAL]
    if scores == "random":
        values = list(np.random.default_rng(7).permutation(len(tokens)).astype(float) - len(tokens))
    else:
        values = [-float(i) for i in range(len(tokens))]
    assert len(tokens) == len(types) == len(values)
    return tokens, values, types


SP_VOCAB_SIZE = len(sentencepiece_vocab()[0])


def llama_cpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's reordering of a Llama q or k projection's rows ([out, ...]): each head's two RoPE
    halves interleaved (LlamaModel.permute in convert_hf_to_gguf.py)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def neox_qkv_rows(w: np.ndarray, n_head: int) -> np.ndarray:
    """GPT-NeoX's fused q, k, v rows ([3 D, ...], per head: q, k, v of head 0, then head 1, ...) as llama.cpp's
    converter writes them: all heads' q, then k, then v (GPTNeoXModel.modify_tensors)."""
    per_head = w.reshape(n_head, 3, -1, *w.shape[1:])
    return np.concatenate([per_head[:, j].reshape(-1, *w.shape[1:]) for j in range(3)])


QUANTIZED = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0")  # gguf.quants.quantize writes these
# K-quants, which gguf can only dequantize: the byte offsets of each block's float16 scales
# (gguf/quants.py, dequantize_blocks: Q2_K d, dmin after 16 scale and 64 quant bytes; Q3_K d after
# 32 + 64 + 12; Q4_K and Q5_K d, dmin first; Q6_K d after 128 + 64 + 16), and the largest
# |quant x sub-block scale| of the type, so that the weights come out at most about 0.1.
K_QUANTS = {"Q2_K": ((80, 82), 15 * 3), "Q3_K": ((108,), 32 * 4), "Q4_K": ((0, 2), 63 * 15),
            "Q5_K": ((0, 2), 63 * 31), "Q6_K": ((208,), 128 * 32)}
TENSOR_TYPES = ("F32", "F16", "BF16", *QUANTIZED, *K_QUANTS)


def random_blocks(kind: str, shape: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    """Valid blocks of a K-quant for a [rows, cols] tensor, as bytes [rows, cols / 256 * block bytes]:
    random bytes with the float16 scale fields overwritten by small finite values."""
    block, size = gguf.GGML_QUANT_SIZES[GGMLQuantizationType[kind]]
    offsets, largest = K_QUANTS[kind]
    blocks = rng.integers(0, 256, (shape[0] * shape[1] // block, size), dtype=np.uint8)
    for at in offsets:
        scale = rng.uniform(0.5, 1.0, (len(blocks), 1)) * 0.1 / largest
        blocks[:, at : at + 2] = scale.astype(np.float16).view(np.uint8)
    return blocks.reshape(shape[0], shape[1] // block * size)


def encode_tensor(x: np.ndarray, kind: str, name: str):
    """(array, raw_dtype) for GGUFWriter.add_tensor: ``x`` [out, in] stored as ``kind``."""
    qtype = GGMLQuantizationType[kind]
    if kind in K_QUANTS:
        return random_blocks(kind, x.shape, np.random.default_rng(zlib.crc32(name.encode()))), qtype
    return gguf.quants.quantize(x, qtype), qtype  # F32 and F16 as such, the others as bytes


def _rope(c) -> tuple[float, dict | None]:
    """(RoPE base, scaling or None) of a transformers config; Gemma 3's global layers' where it has two."""
    params = c.rope_parameters or {}
    params = params.get("full_attention", params)
    kind = params.get("rope_type", "default")
    return params["rope_theta"], None if kind == "default" else params


def _metadata(c, arch: str) -> dict:
    """The metadata llama.cpp's converter writes for this family (after the architecture prefix)."""
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    theta, scaling = _rope(c)
    rotary = getattr(c, "partial_rotary_factor", None) or (c.rope_parameters or {}).get("partial_rotary_factor", 1.0)
    values = {
        "block_count": c.num_hidden_layers, "context_length": c.max_position_embeddings,
        "embedding_length": c.hidden_size, "feed_forward_length": c.intermediate_size,
        "attention.head_count": c.num_attention_heads,
        "attention.head_count_kv": getattr(c, "num_key_value_heads", None) or c.num_attention_heads,
        "rope.freq_base": float(theta), "rope.dimension_count": int(rotary * head_dim), "vocab_size": c.vocab_size,
        "attention.key_length": head_dim, "attention.value_length": head_dim,
    }
    if arch == "gptneox":
        values.update({"attention.layer_norm_epsilon": c.layer_norm_eps, "use_parallel_residual": c.use_parallel_residual})
    else:
        values["attention.layer_norm_rms_epsilon"] = c.rms_norm_eps
    if arch == "gemma2":
        values.update(attn_logit_softcapping=c.attn_logit_softcapping, final_logit_softcapping=c.final_logit_softcapping)
    if arch in ("gemma2", "gemma3", "phi3"):
        values["attention.sliding_window"] = c.sliding_window or 0  # Phi-3: 0 for none
    if arch == "phi3":
        values["rope.scaling.original_context_length"] = c.original_max_position_embeddings
    if scaling is not None and scaling["rope_type"] == "longrope":  # Phi3MiniModel: factor tensors, an attention factor
        scale, original = c.max_position_embeddings / c.original_max_position_embeddings, c.original_max_position_embeddings
        values["rope.scaling.attn_factor"] = math.sqrt(1 + math.log(scale) / math.log(original)) if scale > 1 else 1.0
    elif scaling is not None and scaling["rope_type"] != "llama3":  # llama3: rope_freqs.weight only
        values.update({"rope.scaling.type": scaling["rope_type"], "rope.scaling.factor": float(scaling["factor"])})
    return values


def rope_factor_tensors(c) -> dict[str, np.ndarray]:
    """The RoPE factor tensors llama.cpp's converter adds (float32): LlamaModel's ``rope_freqs`` for llama3
    scaling (each frequency's divisor, from float32 frequencies), Phi3MiniModel's long and short sets."""
    _, scaling = _rope(c)
    if scaling is None or scaling["rope_type"] not in ("llama3", "longrope"):
        return {}
    if scaling["rope_type"] == "longrope":
        return {f"rope_factors_{n}.weight": np.asarray(scaling[f"{n}_factor"], np.float32) for n in ("long", "short")}
    dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    freqs = 1.0 / (np.float32(scaling["rope_theta"]) ** (np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)))
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    old = scaling["original_max_position_embeddings"]
    divisors = []
    for freq in freqs:
        wavelen = 2 * math.pi / float(freq)
        if wavelen < old / high:
            divisors.append(1.0)
        elif wavelen > old / low:
            divisors.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            divisors.append(1 / ((1 - smooth) / factor + smooth))
    return {"rope_freqs.weight": np.asarray(divisors, np.float32)}


def _add(writer, name: str, value) -> None:
    if isinstance(value, bool):
        writer.add_bool(name, value)
    elif isinstance(value, float):
        writer.add_float32(name, value)
    elif isinstance(value, str):
        writer.add_string(name, value)
    elif isinstance(value, list):
        writer.add_array(name, value)
    else:
        writer.add_uint32(name, value)


def write_gguf(path: Path, hf_model=None, arch: str = "llama", *, weight_type: str = "F32", pre: str = "gpt2",
               architecture: str | None = None, drop=(), replace=None, skip_metadata=(), tokenizer_model: str | None = None,
               metadata: dict | None = None, scores: str = "random", extra: dict | None = None) -> Path:
    """A GGUF file of a transformers model (or of the tokenizer alone), as llama.cpp writes it.

    arch: llama.cpp's architecture name ("llama", "qwen2", "qwen3", "phi3", "gemma2", "gemma3", "olmo2",
    "gptneox"); ``architecture`` overrides the name written (general.architecture and the metadata
    prefix). ``weight_type``: the type of every 2-D weight (norms stay F32). ``drop``: GGUF tensor names
    left out; ``replace``: name -> (array, raw_dtype or None) written instead; ``skip_metadata``: keys
    (after the prefix) left out; ``metadata``: more keys (full names) written; ``extra``: more tensors
    (name -> float32 array, GGUF's layout), after the RoPE factor tensors the converter adds
    (``rope_factor_tensors``). ``tokenizer_model``: "gpt2" (``byte_vocab``) or "llama"
    (``sentencepiece_vocab(scores)``); by default the architecture's (``SENTENCEPIECE_ARCHITECTURES``).
    """
    name = architecture or arch
    tokenizer_model = tokenizer_model or ("llama" if arch in SENTENCEPIECE_ARCHITECTURES else "gpt2")
    writer = gguf.GGUFWriter(str(path), name)  # writes general.architecture
    if hf_model is not None:
        for key, value in _metadata(hf_model.config, arch).items():
            if key not in skip_metadata:
                _add(writer, f"{name}.{key}", value)
    for key, value in (metadata or {}).items():
        _add(writer, key, value)
    writer.add_string("tokenizer.ggml.model", tokenizer_model)
    if tokenizer_model == "llama":
        tokens, token_scores, types = sentencepiece_vocab(scores)
        writer.add_array("tokenizer.ggml.scores", token_scores)
        writer.add_uint32("tokenizer.ggml.bos_token_id", 1)
        writer.add_uint32("tokenizer.ggml.eos_token_id", 2)
        writer.add_uint32("tokenizer.ggml.unknown_token_id", 0)
        if arch.startswith("gemma"):
            writer.add_bool("tokenizer.ggml.add_space_prefix", False)
    else:
        tokens, merges, types = byte_vocab()
        writer.add_string("tokenizer.ggml.pre", pre)
        writer.add_array("tokenizer.ggml.merges", merges)
        writer.add_uint32("tokenizer.ggml.bos_token_id", tokens.index("<|endoftext|>"))
        writer.add_uint32("tokenizer.ggml.eos_token_id", tokens.index("<|endoftext|>"))
    writer.add_array("tokenizer.ggml.tokens", tokens)
    writer.add_array("tokenizer.ggml.token_type", types)
    replace = dict(replace or {})
    if hf_model is not None:
        c = hf_model.config
        names = gguf.get_tensor_name_map(next(k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == arch), c.num_hidden_layers)
        tied = getattr(c, "tie_word_embeddings", False)
        for hf_name, tensor in hf_model.state_dict().items():
            if hf_name.endswith(("rotary_emb.inv_freq", "attention.bias", "attention.masked_bias")):
                continue
            if hf_name == "lm_head.weight" and (tied or arch.startswith("gemma")):
                continue  # llama.cpp writes no output.weight for a tied model, nor ever for Gemma
            base, kind = hf_name.rsplit(".", 1)
            g = f"{names.get_name(base)}.{kind}"
            if g in drop:
                continue
            if g in replace:
                data, raw = replace.pop(g)
                writer.add_tensor(g, data, raw_dtype=raw)
                continue
            x = tensor.detach().numpy().astype(np.float32)
            if arch == "llama" and ".attn_q." in g:
                x = llama_cpp_permute(x, c.num_attention_heads)
            elif arch == "llama" and ".attn_k." in g:
                x = llama_cpp_permute(x, c.num_key_value_heads)
            elif arch == "gptneox" and ".attn_qkv." in g:
                x = neox_qkv_rows(x, c.num_attention_heads)
            elif arch.startswith("gemma") and hf_name.endswith("norm.weight"):
                x = x + np.float32(1.0)
            data, raw = encode_tensor(x, weight_type if x.ndim == 2 else "F32", g)
            writer.add_tensor(g, data, raw_dtype=raw)
    factors = {g: x for g, x in (rope_factor_tensors(hf_model.config) if hf_model is not None else {}).items() if g not in drop}
    for g, x in {**factors, **(extra or {})}.items():
        writer.add_tensor(g, x)
    assert not replace, f"no such tensors: {list(replace)}"
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
