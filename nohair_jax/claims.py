"""The machinery of the claims: ``Claim``, ``Judgement``, the typed summaries they read, and running the judges.

A *claim* is one statement of the papers (or a finding of this project's own, marked so) about
models, which the data could contradict: the value the paper gives, the parts of ``nohair
reproduce`` that measure it, and its *criterion*, stated in words before anything is measured
(the quantity, the window, the statistic, the threshold, and what would make it "disagree"). A
*check* is an identity, a derivation or an implementation test (the relay model attains the
bound, a window's reach, conditions that are finite on any finite run, consensus at a gain where
the proof guarantees it): it passes or fails, and it is never counted as agreement with a paper.
Every statement of the two abstracts keeps a claim row; a statement that is proved rather than
measured says so ("not measured at this scale") and names the check that verifies it.

Each part owns its claims: ``experiments/<part>.py`` defines ``Summary`` (a ``TypedDict``: what
its ``run`` returns and saves, and all its judges read), the judges, and ``CLAIMS``. A judge is a
pure function of the summaries of its claim's parts, in the order of ``Claim.parts``, that applies
exactly the criterion and returns a ``Judgement``. The criteria several parts share are in
``nohair_jax.criteria``. ``check_summary`` holds a summary to its type, so that a part that
changes what it saves and the claims that read it cannot drift apart: ``nohair reproduce`` checks
every summary it judges, and ``tests/test_claims.py`` builds its cases with the same types.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Callable, NamedTuple, NotRequired, TypedDict

NOT_MEASURED = "not measured at this scale"
VERDICTS = ("agree", "disagree", NOT_MEASURED)
CLAIM, CHECK = "claim", "check"  # a statement about models the data could contradict; an identity or implementation test
KINDS = (CLAIM, CHECK)

# A record saved by ``to_dict`` (a fit, a difference, a refusal, a bound's check) and read back by
# its ``from_dict``; the summary types leave its keys to the record's own class.
Record = dict[str, Any]


class PartSummary(TypedDict):
    """What a part's summary may record about how it ran, read by no claim: the experiment's profile, its
    resolved settings, the seed, the model's config. A part's ``Summary`` extends it with what its claims read."""

    profile: NotRequired[str]
    settings: NotRequired[dict]
    seed: NotRequired[int]
    model: NotRequired[dict]


class Judgement(NamedTuple):
    """measured: what was measured, in words; interval: [lo, hi] of the quantity judged, or None;
    verdict: one of ``VERDICTS``; evidence: the numbers the verdict was computed from."""

    measured: str
    interval: list | None
    verdict: str
    evidence: dict


@dataclasses.dataclass(frozen=True)
class Claim:
    """One claim, the criterion it is judged by, and its judge.

    ``judge(*summaries) -> Judgement`` gets the summaries of ``parts``, in that order, and is only
    called when every one of them is present (a statement proved rather than measured has no parts
    and a judge of no arguments). ``kind``: ``CLAIM`` or ``CHECK`` (see the module docstring); a
    check's "agree" reads "pass".
    """

    id: str
    claim: str
    paper_value: str
    parts: tuple[str, ...]
    criterion: str
    judge: Callable[..., Judgement]
    kind: str = CLAIM


class SummaryError(ValueError):
    """A part's summary does not hold what its ``Summary`` type says: the message names the key."""


def check_summary(schema: type, summary: Any, where: str = "summary") -> None:
    """Raise ``SummaryError`` unless ``summary`` holds every required key of the ``TypedDict``
    ``schema``, recursively, each of the declared type (``float`` accepts an int; ``Record`` and
    ``dict`` any mapping; keys beyond the type are allowed: a part may save more than its claims read)."""
    _check(schema, summary, where)


def _check(tp, value, where: str) -> None:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return
    if origin in (typing.Union, types.UnionType):
        errors = []
        for option in args:
            try:
                return _check(option, value, where)
            except SummaryError as err:
                errors.append(str(err))
        raise SummaryError(errors[0] if len(errors) == 1 else f"{where}: {value!r:.60} is none of {tp}")
    if tp is None or tp is type(None):
        if value is not None:
            raise SummaryError(f"{where}: expected null, got {value!r:.60}")
        return
    if typing.is_typeddict(tp):
        if not isinstance(value, dict):
            raise SummaryError(f"{where}: expected a mapping ({tp.__name__}), got {type(value).__name__}")
        # NotRequired read from the hints: __required_keys__ misses it under postponed annotations (3.11)
        for key, hint in typing.get_type_hints(tp, include_extras=True).items():
            optional = typing.get_origin(hint) is typing.NotRequired
            if key in value:
                _check(typing.get_args(hint)[0] if optional else hint, value[key], f"{where}.{key}")
            elif not optional:
                raise SummaryError(f"{where}: no key {key!r} ({tp.__name__})")
        return
    if origin is list or origin is tuple or tp in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise SummaryError(f"{where}: expected a list, got {type(value).__name__}")
        item = args[0] if args and origin is list else Any
        for k, v in enumerate(value):
            _check(item, v, f"{where}[{k}]")
        return
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise SummaryError(f"{where}: expected a mapping, got {type(value).__name__}")
        for k, v in value.items():
            _check(args[1] if args else Any, v, f"{where}[{k!r}]")
        return
    expected = {float: (int, float), int: (int,), str: (str,), bool: (bool,)}[tp]
    if not isinstance(value, expected) or (tp is not bool and isinstance(value, bool)):
        raise SummaryError(f"{where}: expected {tp.__name__}, got {value!r:.60}")


def judge_claims(claims, summaries: dict, why_absent: dict | None = None) -> list[dict]:
    """The claims table: one dict per claim (and check) with id, kind, claim, paper_value, criterion, measured, interval,
    verdict, evidence and parts. ``summaries``: part name -> its summary; ``why_absent``: part name -> why it has no
    summary (a claim that reads it is not measured, for that reason)."""
    rows = []
    for claim in claims:
        absent = [p for p in claim.parts if p not in summaries]
        if not absent:
            judged = claim.judge(*(summaries[p] for p in claim.parts))
        else:
            judged = Judgement("; ".join(f"{p}: {(why_absent or {}).get(p, 'the part did not run')}" for p in absent),
                               None, NOT_MEASURED, {})
        if judged.verdict not in VERDICTS:
            raise ValueError(f"claim {claim.id}: verdict {judged.verdict!r} is not one of {VERDICTS}")
        rows.append(dict(id=claim.id, kind=claim.kind, claim=claim.claim, paper_value=claim.paper_value, criterion=claim.criterion,
                         measured=judged.measured, interval=judged.interval, verdict=judged.verdict,
                         evidence=judged.evidence, parts=list(claim.parts)))
    return rows


def part_claims_text(claims, summary: dict) -> str:
    """The claims of one part (``claims``: its ``CLAIMS``) judged on its summary alone, one line each (an
    experiment's printout); claims that also read another part's summary are left out."""
    return "\n".join(f"{c.claim}: {j.verdict}; {j.measured}" for c in claims if len(c.parts) == 1
                     for j in (c.judge(summary),))
