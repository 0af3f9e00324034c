"""The documentation's cross-references: every section of docs/definitions.md that the code, the
tests or the other documents cite exists, and citations name a section, not the whole file."""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _tracked_texts():
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    files = [ROOT / f for f in listed if f.endswith((".py", ".md", ".ipynb"))] or sorted(ROOT.rglob("*.py"))
    return {f.relative_to(ROOT).as_posix(): f.read_text() for f in files if f.is_file()}


def test_every_cited_definition_section_exists():
    anchors = set(re.findall(r'<a id="([a-z0-9-]+)"></a>', (ROOT / "docs" / "definitions.md").read_text()))
    assert {"conventions", "offsets", "fits", "bound"} <= anchors
    cited = {}
    for name, text in _tracked_texts().items():
        for anchor in re.findall(r"definitions\.md#([a-z0-9-]+)", text):
            cited.setdefault(anchor, name)
    assert cited, "no citation found: the scan itself is broken"
    missing = {anchor: name for anchor, name in cited.items() if anchor not in anchors}
    assert not missing, f"cited sections missing from docs/definitions.md: {missing}"


def test_citations_name_a_section():
    old_style = [name for name, text in _tracked_texts().items() if re.search(r'definitions\.md,\s*"', text)]
    assert not old_style, f"cite docs/definitions.md#<section>, not by title: {old_style}"


def test_every_public_function_names_its_arguments():
    """Each argument of a public function is named in its docstring, or is an argument of a public
    function the docstring cites (``inputs as ``prompt_pair_offsets````, say)."""
    import inspect

    import nohair_jax as nh

    undocumented = {}
    for name in nh.__all__:
        obj = getattr(nh, name)
        if inspect.ismodule(obj) or inspect.isclass(obj) or not callable(obj):
            continue
        doc = inspect.getdoc(obj) or ""
        cited = set()
        for ref in re.findall(r"``(?:[\w.]+\.)?(\w+)(?:\([^`]*\))?``", doc):
            target = getattr(nh, ref, None)
            if callable(target) and not inspect.isclass(target):
                cited |= set(inspect.signature(target).parameters)
        params = [p for p in inspect.signature(obj).parameters if p not in ("self", "args", "kwargs", "config")]
        missing = [p for p in params if not re.search(rf"\b{p}\b", doc) and p not in cited]
        if missing or not doc:
            undocumented[name] = missing
    assert not undocumented, undocumented


def test_every_subpackage_is_in_the_wheel():
    """pyproject.toml lists its packages by name: a subpackage missing from the list installs with
    ``pip install -e`` (the tests' and the README's install) but not from a wheel."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "nohair_jax").rglob("__init__.py")}
    assert found and found <= listed, sorted(found - listed)
