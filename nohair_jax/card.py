"""A prompt-memory card: one fixed protocol, one model, the numbers that say how long a prompt steers it.

``nohair card CHECKPOINT`` measures a checkpoint (a GGUF file, a Hugging Face folder, a packaged model's
name) on the same prompt pairs in its own chat form and writes ``card.json`` (its schema: ``CARD_FIELDS``,
``LAYER_FIELDS``, version ``SCHEMA_VERSION``; docs/card.md), ``card.md`` and ``card.png``. Per layer:
alpha with its interval (``measurement.measure``), the calibrated relay's predicted alpha beside it
(``calibrated_relay``), the first key's share of the attention (``sinks``), the sliding window's reach and
the bound's per-layer quantities (``bound``); for the model: the next-token KL's half-life with its interval
(``fit.kl_half_life``) and the theorem's conditions. ``nohair card --compare A.json B.json ..`` lays cards
side by side (``write_comparison``). ``nohair_jax.card_render`` draws and writes them for a reader.

The protocol (``Protocol``, its values ``PROTOCOL``): ``n_pairs`` pairs cut from the held-out part of the
embedded corpus (``data.stdlib_corpus``) in the model's tokens. Each prompt is the chat form's opening (the
tokenizer's BOS where it adds one, the template's tokens before a system prompt) and ``prompt_text`` tokens of
text as the system prompt; the continuation, shared by both, is the template's tokens between the system prompt
and a user message (``ChatForm``), then user text, ``length`` tokens in all: t = 1..T is the same for every
model, and so is the fit window [``fit_t_min``, T]. The parts that cost a forward pass per pair beyond the
offsets run on the first pairs: the calibrated relay on ``relay_pairs``, the conditions on ``condition_pairs``,
the sinks on ``sink_pairs`` (their prompt-a sequences). Definitions: docs/definitions.md and docs/card.md.

This module imports no JAX at load: ``read_card`` checks a card file before the command starts JAX.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import time
from pathlib import Path

import numpy as np

from nohair_jax.fit import FitRefused, PowerLawFit
from nohair_jax.results import atomic_path, jsonable, save_figure, save_json, written_together

SCHEMA_VERSION = 1

@dataclasses.dataclass(frozen=True)
class Protocol:
    """What every card measures, in tokens and counts, fixed before any card was made (docs/card.md says why
    these sizes). ``PROTOCOL`` is the one ``nohair card`` runs; another (the tests' tiny one) makes cards that
    ``--compare`` refuses to set beside these."""

    prompt_text: int = 16  # tokens of held-out text in each system prompt (after the chat form's opening)
    length: int = 512  # T: continuation tokens (the template's turn tokens, then the user text)
    n_pairs: int = 16  # prompt pairs, each three independent cuts of the held-out text
    pair_seed: int = 0  # numpy PCG64 seed of the cuts (pairs.text_prompt_pairs)
    fit_t_min: int = 32  # the fit window [fit_t_min, T] (docs/definitions.md#fits)
    n_boot: int = 1000  # bootstrap resamples of every interval
    floor_pairs: int = 1  # pairs rerun in float64 for the noise floor
    relay_pairs: int = 4  # pairs the calibrated relay reads the attention and gains from
    condition_pairs: int = 2  # pairs the theorem's conditions are measured on (as `nohair bound --pairs 2`)
    sink_pairs: int = 4  # prompt-a sequences whose attention on the first key is read
    kl_positions: str = "log"  # the next-token KL at every t up to 32, then 32 per decade (offsets.log_positions)
    kl_threshold: float = 0.01  # nats: where the KL falls below it

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.type == "int" and not (isinstance(value, int) and value >= (0 if field.name == "pair_seed" else 1)):
                raise ValueError(f"Protocol.{field.name} must be a whole number >= 1, got {value!r}")
        for name in ("floor_pairs", "relay_pairs", "condition_pairs", "sink_pairs"):
            if getattr(self, name) > self.n_pairs:
                raise ValueError(f"Protocol.{name} = {getattr(self, name)} exceeds n_pairs = {self.n_pairs}")
        if not self.fit_t_min < self.length:
            raise ValueError(f"Protocol.fit_t_min = {self.fit_t_min} leaves no fit window in length = {self.length}")
        if not self.kl_threshold > 0:
            raise ValueError(f"Protocol.kl_threshold must be > 0 nats, got {self.kl_threshold!r}")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


PROTOCOL = Protocol()

# ------------------------------------------------------------------------------------- the chat form

# Stand-ins for the system prompt and the user message while the template renders: plain letters, which
# no template rewrites, so that the text before, between and after them is the template's own.
SYSTEM_MARK, USER_MARK = "Qxsystemxq", "Qxuserxq"


@dataclasses.dataclass(frozen=True)
class ChatForm:
    """The model's chat form around a system prompt and a user message, as token ids.

    kind: "template" (the checkpoint's chat template, a system turn), "folded" (its template refuses a
    system role: the system prompt opens the first user message, a blank line after it) or "raw" (no
    template: system prompt, blank line, message). origin: where the template was read. head int32 [k]:
    every prompt's opening, the tokenizer's BOS first where it adds one; mid int32 [m]: the tokens between
    the system prompt and the user message, the continuation's first tokens.
    """

    kind: str
    origin: str
    head: np.ndarray
    mid: np.ndarray


def chat_form(tokenizer, template) -> ChatForm:
    """The ``ChatForm`` of ``template`` (``chat.chat_template``; None: raw text) for ``tokenizer`` (a
    ``tokenizers.Tokenizer``; None: UTF-8 bytes, the project's byte-level models). The template renders a
    conversation of a system prompt and a user message with stand-ins for both; the rendering is tokenized
    once, special tokens read as such, and the tokens wholly before the system prompt's stand-in are the
    head, those wholly between the two stand-ins the mid (a token that joins template text to a stand-in,
    a space before it, is left out). The tokenizer's BOS goes first where the template does not write it
    (as ``chat.system_prompt_pairs``). ValueError where the template drops the user message."""
    from nohair_jax.system_prompts import RAW
    from nohair_jax.tokenization import sequence_start

    kind, rendered = "raw", None
    if template is not None:
        kind = "template"
        try:
            rendered = template.render([dict(role="system", content=SYSTEM_MARK), dict(role="user", content=USER_MARK)])
        except ValueError:  # a template that refuses a system role (raise_exception): fold it into the user turn
            rendered = None
        if rendered is None or SYSTEM_MARK not in rendered:
            kind = "folded"
            rendered = template.render([dict(role="user", content=f"{SYSTEM_MARK}\n\n{USER_MARK}")])
    else:
        template = RAW
        rendered = RAW.render([dict(content=SYSTEM_MARK), dict(content=USER_MARK)])
    at_system, at_user = rendered.find(SYSTEM_MARK), rendered.find(USER_MARK)
    if at_system < 0 or at_user < at_system:
        raise ValueError(f"{template.name} drops the system prompt or the user message (rendered: {rendered[:120]!r})")
    end_system = at_system + len(SYSTEM_MARK)
    head, mid = _spans(tokenizer, rendered, (0, at_system), (end_system, at_user))
    bos = sequence_start(tokenizer)
    if not np.array_equal(head[: bos.size], bos):
        head = np.concatenate([bos, head])
    return ChatForm(kind, "" if kind == "raw" else template.origin, head.astype(np.int32), mid.astype(np.int32))


def _spans(tokenizer, text: str, *spans: tuple[int, int]) -> list[np.ndarray]:
    """The token ids wholly inside each character span of ``text`` tokenized once (UTF-8 bytes without a
    tokenizer)."""
    from nohair_jax.data import encode

    if tokenizer is None:
        return [encode(text[lo:hi]) for lo, hi in spans]
    encoding = tokenizer.encode(text, add_special_tokens=False)
    ids, offsets = np.asarray(encoding.ids, np.int32), np.asarray(encoding.offsets).reshape(-1, 2)
    return [ids[(offsets[:, 0] >= lo) & (offsets[:, 1] <= hi) & (offsets[:, 1] > offsets[:, 0])] for lo, hi in spans]


def heldout_tokens(tokenizer) -> np.ndarray:
    """The held-out part of the embedded corpus (``data.stdlib_corpus``) in ``tokenizer``'s tokens: int32 [n]."""
    from nohair_jax.data import decode, stdlib_corpus
    from nohair_jax.tokenization import tokenize

    return tokenize(tokenizer, decode(stdlib_corpus().heldout))


def card_pairs(tokenizer, form: ChatForm, protocol: Protocol = PROTOCOL):
    """The protocol's prompt pairs in ``form``: ``PromptPairs`` int32 [N, P], [N, P], [N, T] with
    ``P = form.head.size + protocol.prompt_text`` and ``T = protocol.length``. Prompt a and b: the head, then
    ``prompt_text`` tokens cut from the held-out text (``heldout_tokens``); the continuation: ``form.mid``,
    then a third cut (``pairs.text_prompt_pairs``, seed ``protocol.pair_seed``). ValueError where the chat
    form leaves no room for text in T."""
    from nohair_jax.pairs import PromptPairs, text_prompt_pairs

    text_len = protocol.length - form.mid.size
    if text_len < 1:
        raise ValueError(f"the chat form's {form.mid.size} tokens between system prompt and message leave no room "
                         f"for text in T = {protocol.length}")
    cut = text_prompt_pairs(heldout_tokens(tokenizer), protocol.pair_seed, protocol.n_pairs,
                            form.head.size + protocol.prompt_text, text_len, start=form.head)
    mid = np.broadcast_to(form.mid, (protocol.n_pairs, form.mid.size))
    return PromptPairs(cut.prompts_a, cut.prompts_b, np.concatenate([mid, cut.continuations], axis=1).astype(np.int32))


# ------------------------------------------------------------------------------------- the schema

# field -> (JSON types, "|"-separated, "null" where it may be missing; what it holds). docs/card.md has the
# same tables with units; read_card holds every card to them.
CARD_FIELDS = {
    "schema_version": ("int", "SCHEMA_VERSION of the writer"),
    "kind": ("string", "'nohair prompt-memory card'"),
    "made": ("string", "when the card was made, ISO 8601 UTC"),
    "wall_s": ("number", "seconds the measurement took"),
    "nohair_version": ("string", "nohair_jax's version"),
    "model": ("object", "provenance: source, path, format, family, sha256, package, gguf, config"),
    "protocol": ("object", "Protocol.to_dict()"),
    "chat_form": ("object", "kind, origin, head and mid (ids and text), prompt_len P"),
    "n_layers": ("int", "L"),
    "layers": ("list", "one record per layer 1..L (LAYER_FIELDS)"),
    "kl": ("object", "t [K], per_pair [N, K] (nats), text_from (the first t whose KL predicts user text, not the "
           "template's turn tokens), half_life (HalfLife.to_dict(), of the KL at t >= text_from)"),
    "sinks": ("object", "pairs, keys, from_query, dilution_share, sink_factor, layers_above"),
    "window": ("object", "sliding_window, window_layers (1-based) or null"),
    "relay": ("object", "applies, reason (why not, else null), pairs"),
    "conditions": ("object", "pairs, checked, failures, not_derived, notes, sqrt_eps"),
}
LAYER_FIELDS = {
    "layer": ("int", "1..L"),
    "alpha": ("number|null", "offset ~ t^-alpha on the fit window, null where the fit was refused"),
    "alpha_ci": ("list|null", "95 % t-interval over pairs"),
    "fit_window": ("list|null", "[first t, last t] the fit used"),
    "fit_note": ("string|null", "the window's caveat, or why the fit was refused"),
    "relay_alpha": ("number|null", "the calibrated relay's alpha on the same window"),
    "relay_note": ("string|null", "why there is no prediction"),
    "sink_share": ("number", "mean attention weight on key 0 (mean over heads)"),
    "sink": ("bool", "sink_share > sink_factor * dilution_share"),
    "window": ("int|null", "the layer's sliding window in tokens, null: every earlier key"),
    "reach": ("int|null", "how many tokens back h_l can carry information, null: unlimited"),
    "logit_bound": ("number", "B_l, the largest |q.k| / sqrt(d_head)"),
    "sigma_min_attention": ("number", "smallest input scale of the attention's norm(s)"),
    "sigma_min_mlp": ("number", "smallest input scale of the MLP's norm(s)"),
    "shape_slope": ("number|null", "slope of offset / relay shape over [T/16, T]"),
    "shape_ci": ("list|null", "its 95 % t-interval over pairs"),
}
_JSON_TYPES = {"int": (int,), "number": (int, float), "string": (str,), "bool": (bool,), "list": (list,),
               "object": (dict,), "null": (type(None),)}


def _check_fields(record: dict, fields: dict, where: str) -> None:
    """ValueError naming the first field of ``fields`` that ``record`` lacks or holds with another JSON type."""
    for name, (types, _) in fields.items():
        if name not in record:
            raise ValueError(f"{where} has no field {name!r}")
        value, allowed = record[name], [t for kind in types.split("|") for t in _JSON_TYPES[kind]]
        if isinstance(value, bool) and bool not in allowed or not isinstance(value, tuple(allowed)):
            raise ValueError(f"{where}: field {name!r} must be {types}, got {type(value).__name__}")


def check_card(card, where: str = "the card") -> dict:
    """``card`` (a card's JSON contents) checked against the schema (``CARD_FIELDS``, ``LAYER_FIELDS``) and
    returned; ValueError in one line naming ``where`` and what is wrong: another ``schema_version`` first."""
    if not isinstance(card, dict):
        raise ValueError(f"{where} is not a card: a JSON object was expected, got {type(card).__name__}")
    version = card.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ValueError(f"{where} has schema_version {version!r}; this nohair reads version {SCHEMA_VERSION}: "
                         "make the card again with this version")
    _check_fields(card, CARD_FIELDS, where)
    if len(card["layers"]) != card["n_layers"]:
        raise ValueError(f"{where}: {len(card['layers'])} layer records for n_layers = {card['n_layers']}")
    for k, layer in enumerate(card["layers"], start=1):
        if not isinstance(layer, dict):
            raise ValueError(f"{where}: layer record {k} is not an object")
        _check_fields(layer, LAYER_FIELDS, f"{where}, layer {k}")
    return card


def read_card(path: str | Path) -> dict:
    """The ``card.json`` at ``path``, read and checked (``check_card``); ValueError in one line naming the file
    where it cannot be read, is not JSON or not a card of this schema version."""
    try:
        card = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"cannot read the card {str(path)!r}: {getattr(err, 'strerror', None) or err}") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not JSON (line {err.lineno}: {err.msg})") from None
    return check_card(card, str(path))


# ------------------------------------------------------------------------------------- measuring


def measure_card(model, pairs, form: ChatForm, *, protocol: Protocol = PROTOCOL, provenance: dict | None = None,
                 tokenizer=None, progress: bool = False) -> dict:
    """The card of ``model`` (a ``Transformer``) on ``pairs`` (``card_pairs`` of ``form``, ``protocol``), as
    checked JSON data (``check_card``). ``provenance``: where the model came from (``provenance``), saved
    as ``model`` beside its config; ``tokenizer``: used to write the chat form's tokens as text (None: bytes).

    Runs, in this order, each a step of the printed progress: ``measurement.measure`` (offsets of every
    pair, the float32 noise floor on ``floor_pairs``, alpha per layer with its t-interval over pairs on
    [``fit_t_min``, T], the next-token KL at ``kl_positions``); ``calibrated_relay.calibrate_relay`` on the
    first ``relay_pairs`` (its predicted offsets fitted on each layer's measured window; ``applies`` false
    with the reason where the relay refuses the model); ``sinks.sink_attention`` of key 0 on the first
    ``sink_pairs`` prompt-a sequences; ``bound.measure_conditions`` on the first ``condition_pairs`` and the
    bound's shape check (``bound.shape_check``) on every pair."""
    from nohair_jax import __version__
    from nohair_jax.bound import measure_conditions, shape_check
    from nohair_jax.calibrated_relay import calibrate_relay
    from nohair_jax.experiments.sinks import SINK_FACTOR
    from nohair_jax.fit import fit_or_refuse, kl_half_life
    from nohair_jax.measurement import measure
    from nohair_jax.sinks import dilution_share, sink_attention
    from tqdm.auto import tqdm

    start = time.perf_counter()
    cfg, p = model.config, protocol
    a, b, c = (np.asarray(x) for x in pairs)

    def step(what: str) -> None:  # a line per step; the steps over pairs have their own bars
        if progress:
            tqdm.write(f"card: {what}")

    step(f"offsets of {len(a)} pairs, P = {a.shape[1]}, T = {c.shape[1]}")
    m = measure(model, pairs, kl_positions=p.kl_positions, floor_pairs=p.floor_pairs,
                fit_kwargs=dict(t_min=p.fit_t_min, n_boot=p.n_boot), progress=progress)
    off = m.offsets
    # The KL after c[t-1] predicts c[t]: below t = len(mid) it predicts the template's own turn tokens, which
    # both prompts predict alike; the half-life is over the user text (docs/definitions.md#system-prompts).
    text_from = max(int(form.mid.size), 1)
    on_text = off.kl_t >= text_from
    half = kl_half_life(off.kl[:, on_text], t=off.kl_t[on_text], threshold=p.kl_threshold, n_boot=p.n_boot)

    step(f"calibrated relay on {p.relay_pairs} pairs")
    k = p.relay_pairs
    try:
        relay = calibrate_relay(model, a[:k], b[:k], c[:k], progress=progress)
    except ValueError as err:  # the relay is stated for some blocks only: the card says why, and goes on
        relay, relay_record = None, dict(applies=False, reason=str(err), pairs=k)
    else:
        relay_record = dict(applies=True, reason=None, pairs=k)
    predicted = None if relay is None else relay.offsets()

    step(f"attention on the first key, {p.sink_pairs} sequences")
    tokens = np.concatenate([a[: p.sink_pairs], c[: p.sink_pairs]], axis=1)
    share = sink_attention(model, tokens, keys=1).mean(axis=1)  # [L]: mean over heads
    dilution = dilution_share(tokens.shape[1], keys=1)

    step(f"the theorem's conditions on {p.condition_pairs} pairs")
    q = p.condition_pairs
    cond = measure_conditions(model, a[:q], b[:q], c[:q])
    sigma = cond.sigma_by_sublayer()
    shapes = shape_check(off.t, off.l2, off.prompt_len, n_boot=p.n_boot)

    windows = layer_windows(cfg)
    reaches = layer_reach(windows)
    layers = []
    for layer in range(1, cfg.n_layers + 1):
        fit, shape = m.fits[layer - 1], shapes[layer - 1]
        fitted = isinstance(fit, PowerLawFit)
        relay_alpha, relay_note = None, relay_record["reason"] and "the relay does not apply to this model"
        if predicted is not None:
            lo, hi = fit.t_range if fitted else (p.fit_t_min, c.shape[1])
            guess = fit_or_refuse(off.t, predicted[layer], t_min=lo, t_max=hi, n_boot=0)
            relay_alpha = guess.alpha if isinstance(guess, PowerLawFit) else None
            relay_note = guess.reason if isinstance(guess, FitRefused) else None
        shaped = not isinstance(shape, FitRefused)
        layers.append(dict(
            layer=layer, alpha=fit.alpha if fitted else None, alpha_ci=list(fit.ci) if fitted and fit.ci else None,
            fit_window=list(fit.t_range) if fitted else None,
            fit_note=(fit.caveat if fitted else fit.reason), relay_alpha=relay_alpha, relay_note=relay_note,
            sink_share=float(share[layer - 1]), sink=bool(share[layer - 1] > SINK_FACTOR * dilution),
            window=windows[layer - 1], reach=reaches[layer - 1], logit_bound=float(cond.logit_bound[layer - 1]),
            sigma_min_attention=float(sigma["attention"][layer - 1]), sigma_min_mlp=float(sigma["mlp"][layer - 1]),
            shape_slope=shape.slope if shaped else None,
            shape_ci=list(shape.interval) if shaped and shape.interval is not None else None))
    saved = cond.to_dict()
    card = dict(
        schema_version=SCHEMA_VERSION, kind="nohair prompt-memory card",
        made=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        wall_s=time.perf_counter() - start, nohair_version=__version__,
        model=dict(provenance or {}, config=cfg.to_dict()), protocol=p.to_dict(),
        chat_form=dict(kind=form.kind, origin=form.origin, head=form.head.tolist(), head_text=_text(tokenizer, form.head),
                       mid=form.mid.tolist(), mid_text=_text(tokenizer, form.mid), prompt_len=int(a.shape[1]),
                       length=int(c.shape[1])),
        n_layers=cfg.n_layers, layers=layers,
        kl=dict(t=off.kl_t.tolist(), per_pair=off.kl.tolist(), text_from=text_from, half_life=half.to_dict()),
        sinks=dict(pairs=p.sink_pairs, keys=1, from_query=tokens.shape[1] // 2, dilution_share=dilution,
                   sink_factor=SINK_FACTOR, layers_above=sum(layer["sink"] for layer in layers)),
        window=dict(sliding_window=cfg.sliding_window,
                    window_layers=None if cfg.window_layers is None else [k + 1 for k in cfg.window_layers]),
        relay=relay_record,
        conditions=dict(pairs=q, checked=saved["checked"], failures=saved["failures"],
                        not_derived=saved["not_derived"], notes=saved["notes"], sqrt_eps=saved["floor"]),
    )
    return check_card(json.loads(json.dumps(jsonable(card))))  # as card.json will hold it


def _text(tokenizer, ids: np.ndarray) -> str:
    """Token ids as the text they stand for, special tokens written out (bytes without a tokenizer)."""
    if tokenizer is None:
        return bytes(int(i) for i in ids).decode("utf-8", errors="replace")
    return tokenizer.decode([int(i) for i in ids], skip_special_tokens=False)


def layer_windows(cfg) -> list[int | None]:
    """Each layer's sliding window in tokens (``TransformerConfig.sliding_window`` on ``window_layers``, on every
    layer where those are None), None where the layer attends to every earlier key: [L]."""
    if cfg.sliding_window is None:
        return [None] * cfg.n_layers
    on = range(cfg.n_layers) if cfg.window_layers is None else cfg.window_layers
    return [cfg.sliding_window if layer in on else None for layer in range(cfg.n_layers)]


def layer_reach(windows: list[int | None]) -> list[int | None]:
    """How far back, in tokens, the residual stream after each layer can carry information: a query reads the
    keys ``i - W < j <= i`` of a ``W``-token window, ``W - 1`` positions back, and the layers add up; None
    (unlimited) from the first layer without a window on (docs/definitions.md#fits, ``fit.fit_layers``)."""
    reach, out = 0, []
    for window in windows:
        reach = None if reach is None or window is None else reach + window - 1
        out.append(reach)
    return out


def provenance(source) -> dict:
    """Where a checkpoint came from, for a card: the ``source`` as given, its path, format and family
    (Hugging Face ``model_type`` or GGUF ``general.architecture``), the SHA-256 of its file (a GGUF file) or of
    each file it is read from (a folder), the package and installed version of a packaged model, and a GGUF
    file's own description (``checkpoints.gguf_file.describe``)."""
    import importlib.metadata

    from nohair_jax.checkpoints import PACKAGED_MODELS, read_config, resolve_checkpoint, weight_files

    path = resolve_checkpoint(source).resolve()
    record = dict(source=str(source), path=str(path))
    if isinstance(source, str) and source in PACKAGED_MODELS:
        packaged = PACKAGED_MODELS[source]
        record["package"] = dict(distribution=packaged.distribution, version=importlib.metadata.version(packaged.distribution),
                                 file=packaged.file, about=packaged.about)
    if path.is_file():
        from nohair_jax.checkpoints.gguf_file import describe

        gguf = describe(path)
        record.update(format="gguf", family=gguf["architecture"], sha256=_sha256(path), gguf=gguf, name=gguf["name"])
    else:
        files = [path / name for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja")
                 if (path / name).is_file()] + weight_files(path)
        record.update(format="huggingface folder", family=read_config(path).get("model_type"),
                      sha256={f.name: _sha256(f) for f in files}, name=path.name)
    return record


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def make_card(source, out: str | Path, *, protocol: Protocol = PROTOCOL, progress: bool = False) -> dict:
    """Load the checkpoint ``source`` (``checkpoints.load_checkpoint``'s sources), measure its card
    (``measure_card``) with ``protocol`` and write ``card.json``, ``card.md`` and ``card.png`` into ``out``
    (``write_card``); returns the card. ValueError, before any weight is read, for a checkpoint without a
    tokenizer (the pairs are text) or whose context is shorter than the protocol's sequences."""
    from nohair_jax.chat import chat_template
    from nohair_jax.checkpoints import load_model, load_tokenizer

    tokenizer = load_tokenizer(source)
    if tokenizer is None:
        raise ValueError(f"checkpoint {str(source)!r} has no tokenizer (tokenizer.json): the card's prompts are text")
    form = chat_form(tokenizer, chat_template(source))
    pairs = card_pairs(tokenizer, form, protocol)
    model = load_model(source, seq_len=pairs.prompts_a.shape[1] + pairs.continuations.shape[1])
    card = measure_card(model, pairs, form, protocol=protocol, provenance=provenance(source), tokenizer=tokenizer,
                        progress=progress)
    write_card(out, card)
    return card


def write_card(out: str | Path, card: dict) -> Path:
    """``card.json``, ``card.md`` and ``card.png`` of ``card`` into the folder ``out``, together: each through a
    temporary file, renamed into place only when all three are written (``results.written_together``)."""
    from nohair_jax.card_render import card_figure, card_markdown

    out = Path(out)
    with written_together():
        save_json(out / "card.json", card)
        _save_text(out / "card.md", card_markdown(card))
        save_figure(out / "card.png", card_figure(card))
    return out


def _save_text(path: Path, text: str) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------- comparing cards


def check_comparable(cards: list[dict], names: list[str]) -> None:
    """ValueError in one line where the cards were made with different protocols (their numbers would not
    compare), naming the first field that differs and the two cards."""
    first = cards[0]["protocol"]
    for card, name in zip(cards[1:], names[1:]):
        for key in sorted(set(first) | set(card["protocol"])):
            if first.get(key) != card["protocol"].get(key):
                raise ValueError(f"{name} was made with protocol {key} = {card['protocol'].get(key)!r}, {names[0]} with "
                                 f"{first.get(key)!r}: cards of different protocols do not compare")


def write_comparison(out: str | Path, cards: list[dict], names: list[str]) -> str:
    """``compare.md`` (``compare_table``) and ``compare.png`` (``compare_figure``) of ``cards`` into the folder
    ``out``, together; returns the table. ValueError for cards of different protocols (``check_comparable``)."""
    from nohair_jax.card_render import compare_figure, compare_table

    check_comparable(cards, names)
    table = compare_table(cards, names)
    out = Path(out)
    with written_together():
        _save_text(out / "compare.md", table)
        save_figure(out / "compare.png", compare_figure(cards, names))
    return table


__all__ = [
    "CARD_FIELDS", "LAYER_FIELDS", "PROTOCOL", "SCHEMA_VERSION", "ChatForm", "Protocol", "card_pairs", "chat_form",
    "check_card", "check_comparable", "layer_reach", "layer_windows", "make_card", "measure_card", "provenance",
    "read_card", "write_card", "write_comparison",
]
