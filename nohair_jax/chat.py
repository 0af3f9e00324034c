"""System prompts in a model's own chat form: its chat template rendered, the two renderings split
into the prompts that differ and the continuation they share.

A conversation is a list of ``{"role": ..., "content": ...}`` messages. ``chat_template(source)``
reads the checkpoint's template (a GGUF file's ``tokenizer.chat_template``, a folder's
``chat_template.jinja`` or ``tokenizer_config.json``'s ``chat_template``) and renders it with jinja2
as transformers does (a sandbox, ``trim_blocks`` and ``lstrip_blocks``, ``raise_exception``,
``bos_token`` and ``eos_token``). ``system_prompt_pairs`` renders, for every user message, one
conversation per system prompt and splits each right after the system prompt's own text: before it
is that side's prompt, after it the continuation both sides share (the template's tokens that close
the system turn, the user turn, the assistant's header), t = 1 its first token
(docs/definitions.md#offsets). A template that folds the system prompt into the first user turn
(Gemma's) splits the same way; one that does not hold the system prompt verbatim splits at the two
token sequences' longest common suffix. Every user message and turn of the conversation must be in
the rendering as given (the whitespace around it aside), in order; a template that drops or alters
one, or fails, is refused in one line naming it.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

from nohair_jax.pairs import PromptPairs
from nohair_jax.tokenization import sequence_start

TEMPLATE_FILE = "chat_template.jinja"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"


@dataclasses.dataclass(frozen=True)
class ChatTemplate:
    """A chat template (jinja2 source), the special tokens it may name, and where it was read."""

    source: str
    bos_token: str = ""
    eos_token: str = ""
    origin: str = ""

    def render(self, messages: list[dict], *, add_generation_prompt: bool = True) -> str:
        """The conversation ``messages`` as the model reads it (text with its special tokens);
        ``add_generation_prompt`` ends it with the header of the assistant's turn. ValueError naming
        the template (``origin``), in one line, where it is not valid jinja2, refuses the conversation
        (``raise_exception``) or fails while rendering it (any exception its code raises: a division
        by zero, text added to a number, a wrong call, endless recursion)."""
        template = _compiled(self.source, self.name)
        try:
            return template.render(messages=messages, add_generation_prompt=add_generation_prompt,
                                   bos_token=self.bos_token, eos_token=self.eos_token)
        except _Refusal as err:
            raise ValueError(f"{self.name} refuses the conversation: {_one_line(err)}") from None
        except Exception as err:  # the template's own code failed: a user's file, so a line naming it, not a traceback
            raise ValueError(f"{self.name} fails on the conversation ({type(err).__name__}: {_one_line(err)})") from None

    @property
    def name(self) -> str:
        """How messages name this template: where it was read."""
        return f"the chat template of {self.origin or 'the model'}"


class _Refusal(Exception):
    """A template's ``raise_exception(message)``: it refuses the conversation on purpose."""


def _one_line(err: BaseException) -> str:
    """The exception's text on one line (jinja2's may span several), or its type where it has none."""
    return " ".join(str(err).split()) or type(err).__name__


def _compiled(source: str, name: str):
    import jinja2
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise _Refusal(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = lambda x, indent=None: json.dumps(x, ensure_ascii=False, indent=indent)
    env.globals["raise_exception"] = raise_exception
    try:
        return env.from_string(source)
    except jinja2.TemplateSyntaxError as err:
        raise ValueError(f"{name} is not valid jinja2 (line {err.lineno}): {err.message}") from None
    except Exception as err:  # the parser's own limits (nesting too deep): still the template's fault
        raise ValueError(f"{name} cannot be read as jinja2 ({type(err).__name__}: {_one_line(err)})") from None


def chat_template(source: str | Path) -> ChatTemplate | None:
    """The chat template of a checkpoint (``checkpoints.load_checkpoint``'s sources: a packaged
    model's name, a GGUF file, a Hugging Face folder); None where it carries none."""
    from nohair_jax.checkpoints import resolve_checkpoint

    path = resolve_checkpoint(source)
    if path.is_file():
        from nohair_jax.checkpoints.gguf_file import metadata, open_gguf

        reader = open_gguf(path)
        template = metadata(reader, "tokenizer.chat_template", None)
        if template is None:
            return None
        tokens = metadata(reader, "tokenizer.ggml.tokens", [])
        special = {name: metadata(reader, f"tokenizer.ggml.{name}_token_id", None) for name in ("bos", "eos")}
        named = {f"{name}_token": tokens[i] if isinstance(i, int) and 0 <= i < len(tokens) else ""
                 for name, i in special.items()}
        return ChatTemplate(_text(template, path, "tokenizer.chat_template"), origin=str(path), **named)
    if (path / TEMPLATE_FILE).is_file():
        template = _template_file(path / TEMPLATE_FILE)
        config = _tokenizer_config(path)
        return ChatTemplate(template, _token(config, "bos_token"), _token(config, "eos_token"), str(path / TEMPLATE_FILE))
    config = _tokenizer_config(path)
    template = config.get("chat_template")
    if isinstance(template, list):  # several named templates: the default one
        template = next((t.get("template") for t in template if isinstance(t, dict) and t.get("name") == "default"), None)
    if template is None:
        return None
    return ChatTemplate(_text(template, path / TOKENIZER_CONFIG_FILE, "chat_template"), _token(config, "bos_token"),
                        _token(config, "eos_token"), str(path / TOKENIZER_CONFIG_FILE))


def _template_file(path: Path) -> str:
    """A chat_template.jinja's text; ValueError naming the file where it is not UTF-8."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{path} is not UTF-8 text (byte {err.start}: {err.reason}): save the template as UTF-8") from None


def _tokenizer_config(folder: Path) -> dict:
    path = folder / TOKENIZER_CONFIG_FILE
    if not path.is_file():
        return {}
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path} is not valid JSON: {err}") from None
    if not isinstance(config, dict):
        raise ValueError(f"{path} must hold a JSON object, got {type(config).__name__}")
    return config


def _text(value, where, key: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{where}: {key} must be a string (a jinja2 template), got {type(value).__name__}")
    return value


def _token(config: dict, key: str) -> str:
    """A special token of tokenizer_config.json: a string, or an AddedToken's dict with "content"."""
    value = config.get(key) or ""
    return value.get("content", "") if isinstance(value, dict) else str(value)


@dataclasses.dataclass(frozen=True)
class SystemPromptPairs:
    """Two system prompts' conversations with the same user messages, as prompt pairs.

    pairs: ``PromptPairs`` [n, Pa], [n, Pb], [n, T]: one pair per message, each continuation the
    first T tokens of the part both renderings share (T the shortest such part, or ``length``; with
    ``whole``, the longest, the others padded at the end).
    shared: int [n], how many tokens each message's renderings share (before cutting to T).
    message_t: int [n], the t of each user message's first token in its continuation.
    texts: the two renderings of the first message (what the model reads).
    """

    pairs: PromptPairs
    shared: np.ndarray
    message_t: np.ndarray
    texts: tuple[str, str]


def _split(tokenizer, text: str, system: str, message: str) -> tuple[np.ndarray, np.ndarray, int | None]:
    """``text`` tokenized (special tokens read as such; the tokenizer's BOS first, once, where it adds one) and
    split after the system prompt's own text:
    (prompt ids, continuation ids, t of the message's first token or None). Without the system prompt
    verbatim in ``text`` the whole rendering comes back as the prompt."""
    encoding = tokenizer.encode(text, add_special_tokens=False)
    ids, starts = np.asarray(encoding.ids, dtype=np.int32), np.asarray([o[0] for o in encoding.offsets])
    bos = sequence_start(tokenizer)
    if not np.array_equal(ids[: bos.size], bos):  # the tokenizer's BOS where the template does not write it
        ids, starts = np.concatenate([bos, ids]), np.concatenate([np.full(bos.size, -1), starts])
    at = text.find(system) if system else -1
    if at < 0:
        return ids, ids[:0], None
    k = int(np.searchsorted(starts, at + len(system)))  # a token across the boundary stays with the prompt
    found = text.find(message, at + len(system)) if message else -1
    return ids[:k], ids[k:], None if found < 0 else int(np.searchsorted(starts, found)) - k + 1


def system_prompt_pairs(tokenizer, template: ChatTemplate, system_a: str, system_b: str, messages: list[str], *,
                        history: list[dict] = (), length: int | None = None, whole: bool = False,
                        add_generation_prompt: bool = True) -> SystemPromptPairs:
    """Every user message in ``messages`` rendered after ``system_a`` and after ``system_b`` with
    ``template`` (after the turns of ``history`` where given; ``add_generation_prompt``: ending with
    the assistant's header), tokenized with ``tokenizer`` (a ``tokenizers.Tokenizer``), special tokens
    read as such, and split into each side's prompt and the continuation they share: right after the system
    prompt's own text where both renderings agree from there on (so the continuation opens with the
    template's tokens that close the system turn, then the user turn, then the assistant's header),
    else at their longest common suffix. ``whole``: keep every message's whole shared part, the
    shorter ones padded at the end to the longest (with their last token: a causal model's states
    before the padding do not see it), so that each message's last position (the assistant's first
    token) is ``shared[k] - 1``. ValueError for an empty message list, equal system prompts, a
    template that drops or alters a turn of ``history`` or a message (``_check_whole``), or
    renderings whose shared part is empty or shorter than ``length``, naming the message."""
    if not messages:
        raise ValueError("no user messages: give at least one")
    if system_a == system_b:
        raise ValueError("the two system prompts are the same text: there is nothing to compare")
    prompts_a, prompts_b, continuations, shared, message_t, texts = [], [], [], [], [], None
    for k, message in enumerate(messages):
        turns = [*history, dict(role="user", content=message)]
        rendered = [template.render([dict(role="system", content=system), *turns], add_generation_prompt=add_generation_prompt)
                    for system in (system_a, system_b)]
        for text in rendered:
            _check_whole(template, text, turns, k)
        texts = texts or tuple(rendered)
        (pa, ca, ta), (pb, cb, _) = (_split(tokenizer, text, system, message)
                                     for text, system in zip(rendered, (system_a, system_b)))
        if ca.size == 0 or not np.array_equal(ca, cb):  # not verbatim, or merged across the split: the common suffix
            a, b = np.concatenate([pa, ca]), np.concatenate([pb, cb])
            n = _common_suffix(a, b)
            pa, pb, ca, ta = a[: a.size - n], b[: b.size - n], a[a.size - n:], None
        if ca.size == 0 or pa.size == 0 or pb.size == 0:
            raise ValueError(f"message {k + 1}: the two renderings share no continuation after differing prompts; "
                             "the template may drop the system prompt")
        prompts_a.append(pa)
        prompts_b.append(pb)
        continuations.append(ca)
        shared.append(ca.size)
        message_t.append(0 if ta is None else ta)
    t = max(shared) if whole else min(shared) if length is None else length
    if not whole and min(shared) < t:
        k = int(np.argmin(shared))
        raise ValueError(f"message {k + 1} shares {shared[k]} tokens after the system prompts, fewer than --length {t}")
    for side, prompts in (("a", prompts_a), ("b", prompts_b)):
        if len({p.size for p in prompts}) > 1:
            raise ValueError(f"system prompt {side} comes to different token counts before different messages "
                             f"({sorted({p.size for p in prompts})}): the template joins it to the message")
    cut = [np.pad(c, (0, t - c.size), mode="edge") if whole else c[:t] for c in continuations]
    return SystemPromptPairs(PromptPairs(np.stack(prompts_a), np.stack(prompts_b), np.stack(cut)),
                             np.asarray(shared), np.asarray(message_t), texts)


def _check_whole(template: ChatTemplate, text: str, turns: list[dict], k: int) -> None:
    """ValueError unless every turn of ``turns`` (the history, then message ``k``, 0-based) is in
    ``text`` as given, in order, up to the whitespace around it (templates such as Llama 3's trim it):
    a template that drops or rewrites a turn would measure another conversation than the one given.
    The system prompts need no check: one dropped leaves the two renderings alike, which is refused,
    and one rewritten is split at the common suffix."""
    at = 0
    for n, turn in enumerate(turns, start=1):
        content = turn["content"].strip()
        found = text.find(content, at)
        if found < 0:
            what = f"message {k + 1}" if n == len(turns) else f"turn {n} of the history ({turn['role']})"
            raise ValueError(f"{template.name} drops or alters {what}: {content!r:.60} is not in its rendering as given")
        at = found + len(content)


def _common_suffix(a: np.ndarray, b: np.ndarray) -> int:
    """How many tokens at the end of ``a`` and ``b`` are equal."""
    n = min(a.size, b.size)
    differ = np.flatnonzero(a[a.size - n:][::-1] != b[b.size - n:][::-1])
    return int(differ[0]) if differ.size else n


def read_messages(path: str | Path) -> list[str]:
    """User messages from a UTF-8 text file, one per paragraph (separated by blank lines)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"cannot read the messages file {str(path)!r}: {err}") from None
    messages = [" ".join(p.split()) for p in text.split("\n\n") if p.strip()]
    if not messages:
        raise ValueError(f"the messages file {str(path)!r} holds no message (one per paragraph)")
    return messages


def read_history(path: str | Path) -> list[dict]:
    """Earlier turns of a conversation from a JSON file: a list of {"role": "user" or "assistant",
    "content": text}, alternating, starting with the user and ending with the assistant (the turns
    are used in exchanges, ``system_prompts.after_turns``: a last user turn would be left out)."""
    try:
        turns = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"cannot read the conversation file {str(path)!r}: {err}") from None
    if not isinstance(turns, list) or not turns:
        raise ValueError(f"{path}: a conversation must be a non-empty JSON list of turns")
    for k, turn in enumerate(turns):
        role = "user" if k % 2 == 0 else "assistant"
        if not (isinstance(turn, dict) and turn.get("role") == role and isinstance(turn.get("content"), str)):
            raise ValueError(f"{path}: turn {k + 1} must be {{\"role\": \"{role}\", \"content\": text}}, got {turn!r:.80}")
    if len(turns) % 2:  # unanswered: no exchange holds it, and before the message two user turns would follow each other
        raise ValueError(f"{path}: turn {len(turns)}, the last, is a user turn with no assistant answer after it; the "
                         "history is used in exchanges (a user turn and the answer): add the answer or remove the turn")
    return [dict(role=t["role"], content=t["content"]) for t in turns]


__all__ = ["ChatTemplate", "SystemPromptPairs", "chat_template", "read_history", "read_messages", "system_prompt_pairs"]
