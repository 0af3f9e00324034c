"""The reproduction's report: the claims table judged from the parts' summaries, then the checks
table (identities and implementation tests: pass or fail, never counted as agreement), written as
``claims.json`` (for programs, with each row's kind and numbers), ``report.md`` and ``report.html``
(the figures embedded, so the one file can be sent to a reviewer)."""

from __future__ import annotations

import base64
import datetime
import html
import os
import platform
import shlex
import subprocess
import sys
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


def provenance() -> dict:
    """What produced a report: this process's command line, the repository's commit (None outside a git
    checkout; ``local_changes``: tracked files differ from it), the machine (platform, CPU model, the CPUs
    this process may use, memory), Python's and JAX's versions and JAX's backend, and the date (UTC)."""
    import jax

    from nohair_jax.workers import available_cpus

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=Path(__file__).parent, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    cpu = platform.processor() or platform.machine()
    if Path("/proc/cpuinfo").exists():
        names = [line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                 if line.startswith("model name")]
        cpu = names[0] if names else cpu
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30 if hasattr(os, "sysconf") else None
    return dict(command=shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]]), commit=commit,
                local_changes=None if commit is None else bool(git("status", "--porcelain", "--untracked-files=no")),
                machine=dict(platform=platform.platform(), cpu=cpu, cpus=len(available_cpus()),
                             memory_gib=None if memory is None else round(memory, 1)),
                python=platform.python_version(), jax=jax.__version__, backend=jax.default_backend(),
                date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))


def _provenance_text(made: dict) -> str:
    commit = "outside a git checkout" if made["commit"] is None else (
        f"commit {made['commit'][:12]}" + (" with local changes" if made["local_changes"] else ""))
    machine = made["machine"]
    return (f"Made by `{made['command']}` at {commit}, on {machine['cpus']} CPU(s) ({machine['cpu']}, "
            f"{machine['memory_gib']} GiB, {machine['platform']}; Python {made['python']}, JAX {made['jax']} on "
            f"{made['backend']}), finished {made['date']}.")


def write_report(out: Path, profile: str, parts, claims, summaries: dict, statuses: dict) -> list[dict]:
    """Write claims.json, report.md and report.html into ``out``; returns the claims table.

    parts: the ``reproduce.Part`` of every experiment (title, about, figures), in report order; claims:
    every ``claims.Claim``, in report order;
    summaries: part name -> its summary, what the claims are judged from; statuses: part name ->
    one line on how it ran (a part without one gets no section)."""
    absent = {name: status for name, status in statuses.items() if name not in summaries}
    claims = _with_figures(judge_claims(claims, summaries, absent), parts, out)
    made = provenance()
    save_json(out / "claims.json", dict(profile=profile, provenance=made, claims=claims))
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
              f"in the JSON beside them).\n\n{_provenance_text(made)}")
    for name, text in (("report.md", _markdown(claims, sections, header)),
                       ("report.html", _html(claims, sections, header.split("\n")[0], out))):
        with atomic_path(out / name) as tmp:
            tmp.write_text(text)
    return claims
