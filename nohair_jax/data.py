"""Text to train on and to cut prompt pairs from: bytes, an embedded corpus, files, Markov languages.

Everything is byte-level: a token is one byte of UTF-8 text (vocabulary 256), so any text is a
token stream without a trained tokenizer, and "bits per token" is "bits per byte".

Three sources, each a ``Corpus`` with a fixed train / held-out split:

* ``stdlib_corpus()``: English prose that ships with every Python installation, no download. The
  documentation topics of ``pydoc_data.topics`` (the language reference behind ``help("if")``) and
  the docstrings of a fixed list of pure-Python standard-library modules, one document each,
  assembled in a fixed order, without paragraphs that repeat an earlier one (the topics overlap).
  Every tenth document is held out (not a cut through a document, and not only the end of the
  alphabet). On Python 3.11.7: 110 documents, 707,535 bytes, of which 655,299 train and 52,236
  held out (7.4 %). Other Python versions ship slightly different text;
  the corpus description names the version and the sizes.
* ``load_corpus(path)``: any UTF-8 text file; the held-out part is its end, from a line start.
* ``markov_corpus(seed)``: documents from several random sparse Markov chains ("languages") over a
  small printable alphabet, for controlled experiments (a prompt in one language, a continuation
  in another).

``heldout_prompt_pairs`` cuts prompt pairs from a corpus' held-out text for offset measurements.
"""

from __future__ import annotations

import ast
import bisect
import dataclasses
import functools
import hashlib
import importlib.util
import string
import sys
from pathlib import Path

import numpy as np

from nohair_jax.pairs import PromptPairs, text_prompt_pairs

VOCAB_SIZE = 256

# Pure-Python standard-library modules whose docstrings join the pydoc topics: long, mostly prose,
# present in every CPython installation (no optional C dependencies). Fixed so the corpus is too.
STDLIB_MODULES = (
    "argparse", "calendar", "collections", "csv", "dataclasses", "datetime", "difflib",
    "email.message", "enum", "fractions", "functools", "heapq", "inspect", "json", "logging",
    "pathlib", "pickle", "random", "re", "shutil", "statistics", "string", "subprocess", "tarfile",
    "tempfile", "textwrap", "threading", "typing", "unittest.case", "urllib.parse", "zipfile",
)
HELDOUT_EVERY = 10  # stdlib corpus: documents 9, 19, 29, ... (0-based) are held out
DOCUMENT_SEPARATOR = "\n\n"

# The Markov alphabet: symbol s is the byte MARKOV_SYMBOLS[s], so generated text stays printable.
MARKOV_SYMBOLS = (
    string.ascii_lowercase + string.ascii_uppercase + string.digits + string.punctuation + " "
).encode()


def encode(text: str) -> np.ndarray:
    """UTF-8 bytes of ``text`` as int32 token ids [n_bytes], each in [0, 256)."""
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int32)


def decode(tokens) -> str:
    """``tokens``, byte ids (int [n]), back to text; invalid UTF-8 (a cut through a character) becomes U+FFFD."""
    try:
        arr = np.asarray(tokens)
    except ValueError:  # numpy refuses ragged nested sequences
        raise ValueError(f"tokens must be integer byte values [n], got a ragged {type(tokens).__name__}") from None
    if arr.ndim != 1:
        raise ValueError(f"tokens must be integer byte values of shape [n], got shape {arr.shape}")
    if arr.size and (arr.dtype.kind not in "iu" or arr.min() < 0 or arr.max() >= VOCAB_SIZE):
        raise ValueError(f"tokens must be integer byte values in [0, {VOCAB_SIZE}), got dtype {arr.dtype}")
    return arr.astype(np.uint8).tobytes().decode("utf-8", errors="replace")


@dataclasses.dataclass(frozen=True, eq=False)  # arrays have no single truth value: compare fingerprints
class Corpus:
    """A token stream split into train and held-out parts.

    train, heldout: int32 [n] token ids (bytes), read-only.
    name: short identifier (``"stdlib"``, ``"markov"``, a file's stem).
    description: where the text came from and how it was split, with sizes.
    """

    name: str
    description: str
    train: np.ndarray
    heldout: np.ndarray

    def __post_init__(self):
        for part in ("train", "heldout"):
            arr = np.array(getattr(self, part), dtype=np.int32)  # a private copy that can be frozen
            if arr.ndim != 1 or arr.size == 0:
                raise ValueError(f"Corpus.{part} must be a non-empty 1-D token array, got shape {arr.shape}")
            arr.flags.writeable = False
            object.__setattr__(self, part, arr)

    def fingerprint(self) -> str:
        """sha256 of the train and held-out tokens: tells a resumed run it reads the same data."""
        digest = hashlib.sha256(self.train.tobytes())
        digest.update(self.heldout.tobytes())
        return digest.hexdigest()

    def to_dict(self) -> dict:
        """Metadata for result files (not the tokens)."""
        return {
            "name": self.name,
            "description": self.description,
            "train_tokens": int(self.train.size),
            "heldout_tokens": int(self.heldout.size),
            "sha256": self.fingerprint(),
        }


def _split_documents(name: str, description: str, documents: list[str], heldout: list[bool]) -> Corpus:
    """Join documents with ``DOCUMENT_SEPARATOR`` into a train and a held-out stream."""
    pick = lambda keep: encode(DOCUMENT_SEPARATOR.join(d for d, h in zip(documents, heldout) if h == keep))
    train, test = pick(False), pick(True)
    sizes = f"{len(documents)} documents, {train.size + test.size:,} bytes: {train.size:,} train, {test.size:,} held out"
    return Corpus(name=name, description=f"{description} ({sizes})", train=train, heldout=test)


def _module_docstrings(module: str) -> str:
    """All docstrings of a module's source (module, classes, functions), in source order."""
    spec = importlib.util.find_spec(module)
    if spec is None or not (spec.origin or "").endswith(".py"):
        raise ValueError(
            f"the source of the standard-library module {module!r} is not installed; "
            "use load_corpus(path) with a text file instead"
        )
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    return DOCUMENT_SEPARATOR.join(doc for n in _definitions(tree) if (doc := ast.get_docstring(n)))


def _definitions(node: ast.AST):
    """The node, then every class and function inside it, depth first (source order).

    Descends through statements only (defs can sit in if/try/with blocks), never into
    expressions, which are most of a syntax tree and hold no docstrings.
    """
    if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
        yield node
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.stmt, ast.excepthandler)):
            yield from _definitions(child)


def _drop_repeated_paragraphs(documents: list[str]) -> list[str]:
    """Each document without the paragraphs that repeat an earlier paragraph verbatim.

    The pydoc topics overlap (the "compound" topic contains "if", "class", ...): without this,
    held-out text would also be training text.
    """
    seen: set[str] = set()
    unique = []
    for doc in documents:
        kept = []
        for paragraph in doc.split(DOCUMENT_SEPARATOR):
            if paragraph not in seen:
                seen.add(paragraph)
                kept.append(paragraph)
        unique.append(DOCUMENT_SEPARATOR.join(kept))
    return unique


@functools.cache  # immutable (frozen, read-only arrays), and parsing the modules takes a second
def stdlib_corpus() -> Corpus:
    """The embedded default corpus: Python's own documentation prose (see the module docstring).

    Documents, in order: the ``pydoc_data.topics`` topics by sorted key, then one document per
    module of ``STDLIB_MODULES`` (in that order) holding its docstrings; a paragraph (text between
    blank lines) that repeats an earlier one verbatim is dropped. Document ``i`` is held out when
    ``i % 10 == 9``. Deterministic for a given Python version; about 0.7 MB.
    """
    from pydoc_data.topics import topics

    documents = [topics[key] for key in sorted(topics)] + [_module_docstrings(m) for m in STDLIB_MODULES]
    documents = _drop_repeated_paragraphs(documents)
    heldout = [i % HELDOUT_EVERY == HELDOUT_EVERY - 1 for i in range(len(documents))]
    version = ".".join(map(str, sys.version_info[:3]))
    description = (
        f"Python {version} pydoc topics ({len(topics)}) and docstrings of {len(STDLIB_MODULES)} "
        f"stdlib modules, repeated paragraphs dropped; every {HELDOUT_EVERY}th document held out"
    )
    return _split_documents("stdlib", description, documents, heldout)


def load_corpus(path, *, heldout_fraction: float = 0.1) -> Corpus:
    """A UTF-8 text file as a corpus; its last ``heldout_fraction`` of bytes (from a line start) held out.

    The held-out part starts at the first line start at or after the cut, so no line is split
    between train and held out (a file without such a line start is cut at the byte). Raises
    ValueError naming the path for a missing, empty, binary (NUL bytes) or non-UTF-8 file.
    """
    path = Path(path)
    if not 0.0 < heldout_fraction < 1.0:
        raise ValueError(f"heldout_fraction must lie in (0, 1), got {heldout_fraction!r}")
    if not path.is_file():
        raise ValueError(f"corpus file {str(path)!r} does not exist or is not a file")
    raw = path.read_bytes()
    if not raw:
        raise ValueError(f"corpus file {str(path)!r} is empty")
    if b"\x00" in raw:
        raise ValueError(f"corpus file {str(path)!r} holds NUL bytes at offset {raw.index(0)}: binary, not text")
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"corpus file {str(path)!r} is not UTF-8 text: {err}") from None
    if len(raw) < 2:
        raise ValueError(f"corpus file {str(path)!r} has {len(raw)} byte, too few to split into train and held out")

    cut = len(raw) - min(len(raw) - 1, max(1, round(heldout_fraction * len(raw))))
    line_start = raw.find(b"\n", cut - 1) + 1  # first line start at or after the cut (0 if none)
    if 0 < line_start < len(raw):
        cut = line_start
    tokens = np.frombuffer(raw, dtype=np.uint8).astype(np.int32)
    description = (
        f"{path} ({len(raw):,} bytes: {cut:,} train, {len(raw) - cut:,} held out from a line start "
        f"near the last {heldout_fraction:.0%})"
    )
    return Corpus(name=path.stem, description=description, train=tokens[:cut], heldout=tokens[cut:])


def markov_languages(seed: int, n_languages: int = 4, alphabet: int = 32, branching: int = 4) -> np.ndarray:
    """Random sparse Markov chains: transition probabilities [n_languages, alphabet, alphabet].

    In each language every symbol can be followed by ``branching`` distinct symbols (drawn
    uniformly) with Dirichlet(1) probabilities, so a language is predictable to about
    ``log2(branching)`` bits per symbol at most, and languages differ in which successors they allow.
    """
    if not 1 <= alphabet <= len(MARKOV_SYMBOLS):
        raise ValueError(f"alphabet must lie in [1, {len(MARKOV_SYMBOLS)}], got {alphabet!r}")
    if not 1 <= branching <= alphabet:
        raise ValueError(f"branching must lie in [1, alphabet={alphabet}], got {branching!r}")
    if n_languages < 1:
        raise ValueError(f"n_languages must be >= 1, got {n_languages!r}")
    rng = np.random.default_rng(seed)
    probs = np.zeros((n_languages, alphabet, alphabet))
    for lang in range(n_languages):
        for state in range(alphabet):
            successors = rng.choice(alphabet, size=branching, replace=False)
            probs[lang, state, successors] = rng.dirichlet(np.ones(branching))
    return probs


def markov_text(transitions: np.ndarray, length: int, seed) -> np.ndarray:
    """``length`` bytes generated by one language, transitions [alphabet, alphabet]: int32 [length].

    The first symbol is uniform; symbol s is written as the byte ``MARKOV_SYMBOLS[s]``.
    ``seed`` is anything ``numpy.random.default_rng`` takes (an int or a list of ints).
    """
    if length < 1:
        raise ValueError(f"length must be >= 1, got {length!r}")
    rng = np.random.default_rng(seed)
    cumulative = np.cumsum(transitions, axis=1)
    cumulative[:, -1] = 1.0  # rounding must not leave a uniform draw above the last bin
    rows = cumulative.tolist()  # bisect on Python lists: a plain loop is the fast way to run a chain
    symbols = [int(rng.integers(transitions.shape[0]))]
    for u in rng.random(length - 1).tolist():
        symbols.append(bisect.bisect_right(rows[symbols[-1]], u))
    return np.frombuffer(MARKOV_SYMBOLS, dtype=np.uint8)[symbols].astype(np.int32)


def markov_corpus(
    seed: int = 0,
    *,
    n_languages: int = 4,
    alphabet: int = 32,
    branching: int = 4,
    doc_len: int = 4096,
    docs_per_language: int = 32,
    heldout_docs_per_language: int = 4,
) -> Corpus:
    """Documents from ``markov_languages(seed, ...)``, languages taking turns (document i is in
    language ``i % n_languages``); the last ``heldout_docs_per_language`` documents of each language
    are held out. Document ``i`` is ``markov_text(language, doc_len, seed=[seed, i])``; ``alphabet`` and
``branching`` as ``markov_languages``; ``docs_per_language`` documents of each language are trained on.

    Default size: 4 languages x 32 documents x 4096 bytes = 524,288 bytes, 1/8 held out.
    """
    if not 1 <= heldout_docs_per_language < docs_per_language:
        raise ValueError(
            f"heldout_docs_per_language must lie in [1, docs_per_language={docs_per_language}), "
            f"got {heldout_docs_per_language!r}"
        )
    languages = markov_languages(seed, n_languages, alphabet, branching)
    n_docs = n_languages * docs_per_language
    documents = [decode(markov_text(languages[i % n_languages], doc_len, [seed, i])) for i in range(n_docs)]
    heldout = [i >= n_docs - n_languages * heldout_docs_per_language for i in range(n_docs)]
    description = (
        f"Markov languages: seed {seed}, {n_languages} languages, alphabet {alphabet}, branching {branching}, "
        f"documents of {doc_len} bytes, last {heldout_docs_per_language} per language held out"
    )
    return _split_documents("markov", description, documents, heldout)


def heldout_prompt_pairs(
    corpus: Corpus, seed: int, n_pairs: int, prompt_len: int, length: int, *, shared_continuation: bool = False
) -> PromptPairs:
    """Prompt pairs cut from the held-out text: ``text_prompt_pairs(corpus.heldout, ...)``."""
    return text_prompt_pairs(
        corpus.heldout, seed, n_pairs, prompt_len, length, shared_continuation=shared_continuation
    )
