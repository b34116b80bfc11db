"""notebooks/hero_comparison.ipynb runs top to bottom (offline: it falls back to a synthetic sweep)."""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent


def test_hero_notebook_runs_top_to_bottom(monkeypatch, tmp_path):
    monkeypatch.delenv("TPO_RUNS", raising=False)
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path))  # no user kernelspec "python3": this interpreter's kernel
    notebook = nbformat.read(ROOT / "notebooks" / "hero_comparison.ipynb", as_version=4)
    NotebookClient(notebook, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(ROOT / "notebooks")}}).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert sum("image/png" in o.get("data", {}) for o in outputs) == 2  # the hero figure and the paired seeds
    assert any("SYNTHETIC" in o.get("text", "") for o in outputs)
