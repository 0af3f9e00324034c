"""Every notebook runs, top to bottom, at small sizes (``notebooks/execute.py``, as Jupyter would run
it), cites only what is in the repository, and is stored with the outputs of a full-size run."""

import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
_spec = importlib.util.spec_from_file_location("execute", ROOT / "notebooks" / "execute.py")
execute = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(execute)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path, monkeypatch):
    monkeypatch.setenv("NOHAIR_NOTEBOOK_SMALL", "1")
    outputs = execute.run_notebook(path, store=False)
    assert any(outputs), "a notebook shows something"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_keeps_its_outputs_and_cites_the_repository(path):
    notebook = json.loads(path.read_text())
    code = [c for c in notebook["cells"] if c["cell_type"] == "code"]
    assert [c["execution_count"] for c in code] == list(range(1, len(code) + 1)), "run with notebooks/execute.py"
    assert any(c["outputs"] for c in code)
    text = "".join("".join(c["source"]) for c in notebook["cells"])
    for cited in re.findall(r"`?((?:docs|examples|notebooks)/[\w./-]+\.\w+)", text):
        assert (ROOT / cited.split("#")[0]).exists(), cited
    assert "DESIGN.md" not in text


def test_there_are_notebooks():
    assert NOTEBOOKS
