"""The README's front page runs: its Python example prints what the README shows, every `nohair`
command in it exits 0 (with --out in a temporary folder; `path/to/model.gguf` is the packaged
SmolLM2 file), `make run` runs the reproduction it names, and it stays a front page; the usage
guide's example runs too."""

import contextlib
import io
import json
import re
import shlex
from pathlib import Path

import numpy as np
import pytest

from nohair_jax.checkpoints import packaged_model_path
from nohair_jax.cli import main
from nohair_jax.results import load_json

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.S)


def _commands() -> list[list[str]]:
    """Every `nohair ...` command of the README's bash blocks, continuation lines joined, as argv."""
    lines = "\n".join(_blocks("bash")).replace("\\\n", " ").splitlines()
    return [shlex.split(line.split("#")[0] if " #" in line else line)[1:] for line in lines if line.startswith("nohair ")]


def test_readme_is_a_front_page():
    assert len(README.splitlines()) <= 200
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b|Xeon|EPYC|Zen 2", README), "dates and machines belong in docs/"
    for link in re.findall(r"\]\(([^)#]+)", README):
        assert (ROOT / link).exists(), link
    assert "CLAIMS_TABLE" not in README


def test_python_example_prints_what_the_readme_shows():
    (code,), (shown,) = _blocks("python"), _blocks("text")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, "README.md", "exec"), {})
    got, expected = printed.getvalue().splitlines(), shown.splitlines()
    assert len(got) == len(expected)
    for line, want in zip(got, expected):
        assert NUMBER.sub("#", line) == NUMBER.sub("#", want), (line, want)  # the same words
        numbers = [float(x) for x in NUMBER.findall(line)]
        assert numbers == pytest.approx([float(x) for x in NUMBER.findall(want)], abs=0.02, rel=0.02), (line, want)


# The README's sizes cut where the suite runs its commands on the real 30-layer model (each run is
# mostly the model's forward passes): fewer pairs and continuations, the same code paths.
SMALLER = {"--cut": "2", "--length": "64"}


@pytest.mark.parametrize("argv", _commands(), ids=lambda argv: " ".join(argv[:3]))
def test_every_command_runs(argv, tmp_path, monkeypatch, capsys):
    """Each command as the README writes it, options and files included, but for its sizes: the
    options of ``SMALLER`` take their smaller values, and ``prompts`` reads the first two of its
    messages and the first exchange of its conversation (its full run, 8 messages after 3 exchanges,
    took 100 s of the suite's 10 minutes). The prompts run, the suite's one of that command on the
    real model, is checked for what it writes (``_check_prompts``)."""
    monkeypatch.chdir(ROOT)  # the commands name files of the repository (examples/)
    gguf = str(packaged_model_path("smollm2-135m"))
    argv = [gguf if a == "path/to/model.gguf" else a for a in argv]
    argv[argv.index("--out") + 1] = str(tmp_path / "out")
    for option, value in SMALLER.items():
        if option in argv:
            argv[argv.index(option) + 1] = value
    # The file options' first two entries: two messages (paragraphs), the conversation's first exchange.
    shorten = {"--messages": lambda text: "\n\n".join(text.split("\n\n")[:2]),
               "--history": lambda text: json.dumps(json.loads(text)[:2])}
    for option, cut in shorten.items():
        if option in argv:
            at = argv.index(option) + 1
            shorter = tmp_path / Path(argv[at]).name
            shorter.write_text(cut(Path(argv[at]).read_text()))
            argv[at] = str(shorter)
    assert main(argv) == 0
    if argv[0] == "prompts":
        _check_prompts(tmp_path / "out", capsys.readouterr().out, turns=1)


def _check_prompts(out: Path, printed: str, turns: int) -> None:
    """The result set of a prompts run of two system prompts on two messages with ``turns`` earlier
    exchanges: what it prints, the summary, the offsets the summary draws from, the figure."""
    assert printed.count("next-token KL: peak") == 1
    assert printed.count(f"after {turns} earlier turn(s): KL at the reply's first token") == 1
    summary = load_json(out / "prompts.json")
    (row,) = summary["pairs"]
    assert row["systems"] == [1, 2] and row["messages"] == 2 and len(row["fits"]) == 30
    assert row["length"] == min(row["shared_tokens"])
    half = row["half_life"]
    assert half["n_pairs"] == 2 and half["ci"][0] <= half["t"] <= half["ci"][1]
    with np.load(out / row["folder"] / "offsets.npz") as data:  # the KL the summary draws is the measured one
        np.testing.assert_allclose(row["kl_mean"], data["kl"].mean(0), rtol=1e-6)
    assert [r["turns"] for r in row["turns"]] == list(range(turns + 1))
    assert all(len(r["per_message"]) == 2 for r in row["turns"])
    assert row["turns"][0]["ci"][0] <= row["turns"][0]["kl_reply"] <= row["turns"][0]["ci"][1]
    assert (out / "prompts.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_make_run_runs_the_reproduction_the_readme_names():
    assert {"prompts", "offsets", "bound", "reproduce"} <= {argv[0] for argv in _commands()}
    makefile = (ROOT / "Makefile").read_text()
    assert "OUT ?= results" in makefile and "$(BIN)/nohair reproduce --out $(OUT)/reproduce" in makefile
    assert "`nohair reproduce --out results/reproduce`" in README


def test_usage_guide_python_runs_and_prints():
    text = (ROOT / "docs" / "usage.md").read_text()
    (code,) = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, "docs/usage.md", "exec"), {})
    assert re.fullmatch(r"last layer: alpha \d\.\d\d \[\d\.\d\d, \d\.\d\d\] on t in \[32, \d+\]\n", printed.getvalue())
