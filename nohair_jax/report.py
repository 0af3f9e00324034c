"""The reproduction's report: the claims table judged from the parts' summaries, then the checks
table (identities and implementation tests: pass or fail, never counted as agreement), written as
``claims.json`` (for programs, with each row's kind and numbers), ``report.md`` and ``report.html``
(the figures embedded, so the one file can be sent to a reviewer)."""

from __future__ import annotations

import base64
import html
from pathlib import Path

from nohair_jax.claims import CHECK, CLAIM, NOT_MEASURED, VERDICTS, judge_claims
from nohair_jax.results import atomic_path, save_json

_CHECK_RESULT = {"agree": "pass", "disagree": "fail", NOT_MEASURED: NOT_MEASURED}  # a check passes, never "agrees"


def _interval_text(interval) -> str:
    return "" if interval is None else f"[{interval[0]:.3g}, {interval[1]:.3g}]"


def _with_figures(claims: list[dict], parts, out: Path) -> list[dict]:
    """Each claim with ``figures``: the figures of its parts that exist (the evidence to look at)."""
    by_name = {p.name: p for p in parts}
    return [dict(c, figures=[f"{name}/{f}" for name in c["parts"] for f in by_name[name].figures
                             if (out / name / f).exists()]) for c in claims]


def _shown(row: dict) -> str:
    """The verdict as the report shows it: a check's "pass" or "fail"."""
    return _CHECK_RESULT[row["verdict"]] if row["kind"] == CHECK else row["verdict"]


_TABLES = ((CLAIM, "Claims", "claim", "paper"), (CHECK, "Checks of the implementation and the derivations", "check",
                                                  "expected"))


def _markdown(claims: list[dict], sections: list[dict], header: str) -> str:
    lines = [header]
    for kind, title, what, value in _TABLES:
        lines += ["", f"## {title}", "", f"| {what} | {value} | measured here | interval | {'verdict' if kind == CLAIM else 'result'} |",
                  "|---|---|---|---|---|"]
        for c in (c for c in claims if c["kind"] == kind):
            cells = [c["claim"], c["paper_value"], c["measured"], _interval_text(c["interval"]), f"**{_shown(c)}**"]
            lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    lines += ["", "## How each claim and check is judged", ""]
    for c in claims:
        shown = ", ".join(f"[{f}]({f})" for f in c["figures"]) or "no figure"
        lines.append(f"- **{c['id']}** ({c['kind']}, {_shown(c)}): {c['criterion']} Evidence: `claims.json`, {shown}.")
    for sec in sections:
        lines += ["", f"## {sec['title']}", "", sec["about"], "", f"*{sec['status']}*", ""]
        lines += [f"![{sec['title']}]({fig})" for fig in sec["figures"]]
    return "\n".join(lines) + "\n"


def _html(claims: list[dict], sections: list[dict], header: str, out: Path) -> str:
    esc = html.escape
    body = [f"<h1>{esc(header.lstrip('# '))}</h1>"]
    for kind, title, what, value in _TABLES:
        rows = "".join(
            "<tr>" + "".join(f"<td>{esc(str(v))}</td>" for v in (c["claim"], c["paper_value"], c["measured"],
                                                                _interval_text(c["interval"])))
            + f"<td class='{c['verdict'].split()[0]}'>{esc(_shown(c))}</td></tr>"
            for c in claims if c["kind"] == kind
        )
        body.append(f"<h2>{esc(title)}</h2><table><tr><th>{what}</th><th>{value}</th><th>measured here</th>"
                    f"<th>interval</th><th>{'verdict' if kind == CLAIM else 'result'}</th></tr>{rows}</table>")
    criteria = "".join(f"<li><b>{esc(c['id'])}</b> ({esc(c['kind'])}, {esc(_shown(c))}): {esc(c['criterion'])} "
                       f"Evidence: {esc(', '.join(c['figures']) or 'no figure')}.</li>" for c in claims)
    body.append(f"<h2>How each claim and check is judged</h2><ul>{criteria}</ul>")
    for sec in sections:
        body += [f"<h2>{esc(sec['title'])}</h2><p>{esc(sec['about'])}</p><p><em>{esc(sec['status'])}</em></p>"]
        for fig in sec["figures"]:
            data = base64.b64encode((out / fig).read_bytes()).decode("ascii")
            body.append(f"<img alt='{esc(fig)}' src='data:image/png;base64,{data}'>")
    style = ("body{font-family:sans-serif;max-width:70em;margin:auto}td,th{border:1px solid #ccc;padding:4px;"
             "vertical-align:top}table{border-collapse:collapse}.agree{background:#dfd}.disagree{background:#fdd}"
             ".not{background:#eee}img{max-width:100%}")
    return f"<!doctype html><html><head><meta charset='utf-8'><title>nohair reproduce</title><style>{style}</style></head>" \
           f"<body>{''.join(body)}</body></html>\n"


def write_report(out: Path, profile: str, parts, claims, summaries: dict, statuses: dict) -> list[dict]:
    """Write claims.json, report.md and report.html into ``out``; returns the claims table.

    parts: the ``reproduce.Part`` of every experiment (title, about, figures), in report order; claims:
    every ``claims.Claim``, in report order;
    summaries: part name -> its summary, what the claims are judged from; statuses: part name ->
    one line on how it ran (a part without one gets no section)."""
    absent = {name: status for name, status in statuses.items() if name not in summaries}
    claims = _with_figures(judge_claims(claims, summaries, absent), parts, out)
    save_json(out / "claims.json", dict(profile=profile, claims=claims))
    sections = []
    for part in parts:
        if part.name not in statuses:
            continue
        figures = [f"{part.name}/{f}" for f in part.figures if (out / part.name / f).exists()]
        sections.append(dict(title=part.title, about=part.about, status=statuses[part.name], figures=figures))
    counts = {v: sum(c["verdict"] == v for c in claims if c["kind"] == CLAIM) for v in VERDICTS}
    checks = [c["verdict"] for c in claims if c["kind"] == CHECK]
    header = (f"# nohair reproduce: {profile} profile\n\n{counts['agree']} claims agree, {counts['disagree']} disagree, "
              f"{counts[NOT_MEASURED]} not measured at this scale; {checks.count('agree')} of {len(checks)} checks pass "
              f"({checks.count('disagree')} fail). Raw offsets of every measured model are the "
              "`offsets*.npz` files under each part's folder (arrays `t`, `l2` [n_pairs, L+1, T]; fits and windows "
              "in the JSON beside them).")
    for name, text in (("report.md", _markdown(claims, sections, header)),
                       ("report.html", _html(claims, sections, header.split("\n")[0], out))):
        with atomic_path(out / name) as tmp:
            tmp.write_text(text)
    return claims
