"""Run notebooks top to bottom and store their outputs, as Jupyter would show them: what a cell
prints, the value of its last expression, and a matplotlib Figure as a PNG. No kernel and no
Jupyter needed (the notebooks are plain Python cells).

    python notebooks/execute.py                       # every notebook here, outputs stored
    python notebooks/execute.py 05_real_model.ipynb   # one of them

Cells run with this folder as the working directory, as Jupyter runs them. The test suite runs
each notebook through ``run_notebook`` at small sizes (``NOHAIR_NOTEBOOK_SMALL=1``) without storing.
"""

from __future__ import annotations

import ast
import base64
import contextlib
import io
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _outputs(value, printed: str, count: int) -> list[dict]:
    outputs = [dict(output_type="stream", name="stdout", text=printed.splitlines(keepends=True))] if printed else []
    if value is None:
        return outputs
    from matplotlib.figure import Figure

    if isinstance(value, Figure):
        png = io.BytesIO()
        value.savefig(png, format="png", dpi=80, bbox_inches="tight")
        data = {"image/png": base64.b64encode(png.getvalue()).decode(), "text/plain": [repr(value)]}
        return outputs + [dict(output_type="display_data", data=data, metadata={})]
    return outputs + [dict(output_type="execute_result", execution_count=count, data={"text/plain": [repr(value)]},
                           metadata={})]


def run_notebook(path: str | Path, *, store: bool = True) -> list[list[dict]]:
    """Run the notebook at ``path`` in one namespace; returns each code cell's outputs and, with
    ``store``, writes them into the file (progress bars on stderr are not kept)."""
    path = Path(path)
    notebook = json.loads(path.read_text())
    namespace: dict = {"__name__": "__main__"}
    results, count = [], 0
    with contextlib.chdir(path.parent):
        for cell in notebook["cells"]:
            if cell["cell_type"] != "code":
                continue
            count += 1
            tree = ast.parse("".join(cell["source"]), filename=path.name)
            last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(io.StringIO()):
                exec(compile(tree, path.name, "exec"), namespace)
                value = None if last is None else eval(compile(ast.Expression(last.value), path.name, "eval"), namespace)
            cell["outputs"], cell["execution_count"] = _outputs(value, printed.getvalue(), count), count
            results.append(cell["outputs"])
    if store:
        path.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n")
    return results


if __name__ == "__main__":
    for name in sys.argv[1:] or sorted(p.name for p in HERE.glob("*.ipynb")):
        print(f"running {name}", flush=True)
        os.environ.pop("NOHAIR_NOTEBOOK_SMALL", None)
        run_notebook(HERE / name)
