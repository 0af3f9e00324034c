"""Every notebook runs, top to bottom, at small sizes, and is stored without outputs."""

import json
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path, monkeypatch):
    monkeypatch.setenv("NOHAIR_NOTEBOOK_SMALL", "1")
    cells = json.loads(path.read_text())["cells"]
    assert all(not c.get("outputs") for c in cells if c["cell_type"] == "code"), "store notebooks without outputs"
    namespace: dict = {}
    for cell in cells:
        if cell["cell_type"] == "code":
            exec(compile("".join(cell["source"]), f"{path.name}", "exec"), namespace)


def test_there_are_notebooks():
    assert NOTEBOOKS
