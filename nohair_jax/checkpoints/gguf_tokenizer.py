"""A GGUF file's tokenizer, from its ``tokenizer.ggml.*`` metadata, as a ``tokenizers.Tokenizer``.

Two kinds (``tokenizer.ggml.model``), read as llama.cpp reads them (its ``llama-vocab.cpp``):

- ``"gpt2"``, byte-level BPE (GPT-2, Llama 3, Qwen, SmolLM2, OLMo 2): the vocabulary and merges from
  the file, the text split before BPE as llama.cpp splits it for the file's ``tokenizer.ggml.pre``
  (``PRE_TOKENIZERS``).
- ``"llama"``, SentencePiece BPE (Llama 2, Gemma, Phi-3): the pieces and their scores, no merges.
  SentencePiece merges, again and again, the adjacent pair whose joined piece is in the vocabulary
  with the highest score; that is BPE with one merge per way of cutting a piece in two, ranked by
  the piece's score (``_score_merges``). Spaces are written "▁", with one put in front of the text
  where ``tokenizer.ggml.add_space_prefix`` says so (true unless written, as llama.cpp reads it;
  Gemma's files say false); a character outside the vocabulary falls back to its UTF-8 bytes
  (the pieces ``<0x00>`` .. ``<0xFF>``). **(choice)** Text that already starts with "▁" (a space, or
  a "▁" written in it) gets no second one, as transformers reads these files (its Llama tokenizer's
  ``Metaspace``): the text "▁▁" is the one piece "▁▁", where llama.cpp, which puts a "▁" in front of
  every text, makes it "▁▁▁": "▁▁" and "▁". Phi-3's files get one in front of every text
  (``ALWAYS_PREFIXED``), as both read them. Text after a special token that does not start with "▁"
  gets one, as llama.cpp gives it (transformers' Llama tokenizer gives none there).

In both, tokens marked control (``<|im_start|>``, ``<start_of_turn>``) match whole as special tokens
and user-defined ones as added tokens. What is put around a sequence differs: **(choice)** byte-level
files get nothing, whatever ``tokenizer.ggml.add_bos_token`` says, as transformers reads the same file
and as those models' own ``tokenizer.json`` does; SentencePiece files get BOS (and EOS) as their
``add_bos_token`` (default true) and ``add_eos_token`` say, as llama.cpp and transformers do: Llama 2
and Gemma are trained with it.
"""

from __future__ import annotations

from pathlib import Path

from nohair_jax.checkpoints.gguf_file import metadata, open_gguf
from nohair_jax.metadata import BOOL, TOKENIZER_SCHEMA, CheckpointError, check_values

# llama.cpp's pre-tokenizer regexes (llama-vocab.cpp), by tokenizer.ggml.pre.
_QWEN2_SPLIT = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_LLAMA3_SPLIT = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# pre name -> how text is split before BPE: "gpt2" (GPT-2's regex), "digits" (each digit apart,
# then GPT-2's regex), or a regex of its own.
PRE_TOKENIZERS = {
    "default": "gpt2", "gpt2": "gpt2", "gpt-2": "gpt2", "olmo": "gpt2",
    "smollm": "digits", "starcoder": "digits", "refact": "digits", "codeshell": "digits",
    "qwen2": _QWEN2_SPLIT, "llama-bpe": _LLAMA3_SPLIT, "llama3": _LLAMA3_SPLIT, "dbrx": _LLAMA3_SPLIT,
    "smaug-bpe": _LLAMA3_SPLIT,
}
# llama.cpp's token types (SentencePiece's piece types).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
SPACE = "\u2581"  # SentencePiece's "▁"
# SentencePiece switches and their values where a file has none (llama.cpp's).
SWITCHES = {"add_space_prefix": True, "add_bos_token": True, "add_eos_token": False}
# The architectures whose text gets its "▁" in front even where it starts with one (a space, or "▁" itself), as
# transformers reads their files; the others get none there (``_sentencepiece``).
ALWAYS_PREFIXED = ("phi3",)


def _tokenizers():
    try:
        import tokenizers
    except ImportError:
        raise ImportError("the GGUF tokenizer needs tokenizers: pip install 'nohair-jax[hf]'") from None
    return tokenizers


def gguf_tokenizer(path: str | Path):
    """The file's tokenizer (module docstring) as a ``tokenizers.Tokenizer``; CheckpointError naming the
    file for other kinds (``"bert"``, ``"t5"``), unknown splits and damaged metadata."""
    reader = open_gguf(path)
    kind = metadata(reader, "tokenizer.ggml.model", None)
    if kind not in ("gpt2", "llama"):
        raise CheckpointError(f"{path}: tokenizer {kind!r} is not supported (byte-level BPE 'gpt2' and "
                              f"SentencePiece 'llama')")
    tokens = metadata(reader, "tokenizer.ggml.tokens")
    types = metadata(reader, "tokenizer.ggml.token_type", [NORMAL] * len(tokens) if isinstance(tokens, list) else [])
    values = dict(tokens=tokens, token_type=types)
    if kind == "gpt2":
        values["merges"] = metadata(reader, "tokenizer.ggml.merges")
    else:
        values["scores"] = metadata(reader, "tokenizer.ggml.scores")
    check_values(values, TOKENIZER_SCHEMA, str(path), names={key: f"tokenizer.ggml.{key}" for key in TOKENIZER_SCHEMA})
    for key in ("token_type", "scores"):
        if key in values and len(values[key]) != len(tokens):
            raise CheckpointError(f"{path}: tokenizer.ggml.{key} has {len(values[key])} entries for {len(tokens)} tokens")
    try:
        if kind == "gpt2":
            tokenizer = _byte_level(path, tokens, values["merges"], metadata(reader, "tokenizer.ggml.pre", "default"))
        else:
            tokenizer = _sentencepiece(reader, tokens, values["scores"], types)
    except CheckpointError:
        raise
    except Exception as err:  # the tokenizers library's own exceptions: one line naming the file
        raise CheckpointError(f"{path}: the tokenizer cannot be built: {str(err).splitlines()[0]}") from None
    AddedToken = _tokenizers().AddedToken
    tokenizer.add_special_tokens([AddedToken(tok, normalized=False, special=True)
                                  for tok, kind in zip(tokens, types) if kind == CONTROL])
    tokenizer.add_tokens([AddedToken(tok, normalized=False) for tok, kind in zip(tokens, types) if kind == USER_DEFINED])
    return tokenizer


def _byte_level(path, tokens: list[str], merges: list[str], pre: str):
    """Byte-level BPE: vocabulary and merges as written, the text split as llama.cpp splits it for ``pre``."""
    if pre not in PRE_TOKENIZERS:
        raise CheckpointError(f"{path}: tokenizer split {pre!r} is not supported; supported: {', '.join(PRE_TOKENIZERS)}")
    known = set(tokens)
    unknown = [m for m in merges if not all(part in known for part in m.split(" ", 1))]
    if unknown:
        raise CheckpointError(f"{path}: tokenizer.ggml.merges holds {len(unknown)} merge(s) of tokens outside the "
                              f"vocabulary, the first {unknown[0]!r:.60}")
    tk = _tokenizers()
    pre_tokenizers, Regex = tk.pre_tokenizers, tk.Regex
    tokenizer = tk.Tokenizer(tk.models.BPE(vocab={tok: i for i, tok in enumerate(tokens)},
                                           merges=[tuple(m.split(" ", 1)) for m in merges]))
    split = PRE_TOKENIZERS[pre]
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=split in ("gpt2", "digits"))
    if split == "gpt2":
        tokenizer.pre_tokenizer = byte_level
    elif split == "digits":
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    else:
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(split), behavior="isolated"), byte_level])
    tokenizer.decoder = tk.decoders.ByteLevel()
    return tokenizer


def _score_merges(tokens: list[str], scores: list[float], types: list[int]) -> list[tuple[str, str]]:
    """SentencePiece's merges as BPE merges, best first: for every piece of type normal or user-defined, each
    cut into two pieces of those types, ranked by the joined piece's score (ties: the lower id first)."""
    usable = {tok: i for i, (tok, kind) in enumerate(zip(tokens, types)) if kind in (NORMAL, USER_DEFINED)}
    ranked = []
    for tok, i in usable.items():
        for cut in range(1, len(tok)):
            left, right = tok[:cut], tok[cut:]
            if left in usable and right in usable:
                ranked.append((-scores[i], i, usable[left], left, right))
    ranked.sort()
    return [(left, right) for *_, left, right in ranked]


def _sentencepiece(reader, tokens: list[str], scores: list[float], types: list[int]):
    """SentencePiece BPE (module docstring), with byte fallback where the file has the 256 byte pieces."""
    tk = _tokenizers()
    normalizers, decoders = tk.normalizers, tk.decoders
    switches = {key: metadata(reader, f"tokenizer.ggml.{key}", default) for key, default in SWITCHES.items()}
    check_values(switches, {key: BOOL for key in SWITCHES}, str(reader.path), prefix="tokenizer.ggml.")
    unk = _token(reader, tokens, "unknown_token_id") or (
        (tokens[types.index(UNKNOWN)], types.index(UNKNOWN)) if UNKNOWN in types else None)
    byte_pieces = {tok for tok, kind in zip(tokens, types) if kind == BYTE}
    tokenizer = tk.Tokenizer(tk.models.BPE(
        vocab={tok: i for i, tok in enumerate(tokens)}, merges=_score_merges(tokens, scores, types),
        unk_token=unk and unk[0], fuse_unk=True, byte_fallback={f"<0x{b:02X}>" for b in range(256)} <= byte_pieces))
    prefix = switches["add_space_prefix"]
    if prefix and metadata(reader, "general.architecture", None) not in ALWAYS_PREFIXED:
        # Spaces as "▁", and a "▁" in front of each piece of text between special tokens unless it starts with one.
        tokenizer.pre_tokenizer = tk.pre_tokenizers.Metaspace(replacement=SPACE, prepend_scheme="always", split=False)
    else:
        tokenizer.normalizer = normalizers.Sequence([normalizers.Prepend(SPACE)] * prefix + [normalizers.Replace(" ", SPACE)])
    tokenizer.decoder = decoders.Sequence([decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
                                          + [decoders.Strip(" ", 1, 0)] * prefix)
    ends = {end: _token(reader, tokens, f"{end}_token_id") for end in ("bos", "eos") if switches[f"add_{end}_token"]}
    for end, token in ends.items():
        if token is None:
            raise CheckpointError(f"{reader.path}: tokenizer.ggml.add_{end}_token is true without tokenizer.ggml.{end}_token_id")
    if ends:
        single = ([ends["bos"][0]] if "bos" in ends else []) + ["$A"] + ([ends["eos"][0]] if "eos" in ends else [])
        tokenizer.post_processor = tk.processors.TemplateProcessing(single=single, special_tokens=list(ends.values()))
    return tokenizer


def _token(reader, tokens: list[str], key: str) -> tuple[str, int] | None:
    """(token, id) that ``tokenizer.ggml.<key>`` names, the id checked to be in the vocabulary; None where absent."""
    token_id = metadata(reader, f"tokenizer.ggml.{key}", None)
    if token_id is None:
        return None
    if not isinstance(token_id, int) or isinstance(token_id, bool) or not 0 <= token_id < len(tokens):
        raise CheckpointError(f"{reader.path}: tokenizer.ggml.{key} is {token_id!r:.40}, not a token id below {len(tokens)}")
    return tokens[token_id], token_id
