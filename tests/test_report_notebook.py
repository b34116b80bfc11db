"""notebooks/hero_comparison.ipynb runs top to bottom against the committed runs (results/runs/fig4_mnist and
results/runs/fig1b_sparse, offline) and on request against a synthetic sweep; and it is committed with its outputs.
Nothing here compares numbers against ones written on another machine (only structure and labels), so no CPU moves
what these tests check."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "hero_comparison.ipynb"
MAX_BYTES = 500_000  # two figures and a few tables; a larger file likely embeds something it should not


def _outputs(notebook) -> list:
    return [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]


def _text(outputs) -> str:
    return "\n".join(o.get("text", "") + o.get("data", {}).get("text/plain", "") for o in outputs)


def _images(outputs) -> int:
    return sum("image/png" in o.get("data", {}) for o in outputs)


@pytest.mark.parametrize("source", ["", "synthetic"], ids=["committed-runs", "synthetic"])
def test_hero_notebook_runs_top_to_bottom(source, monkeypatch, tmp_path):
    if source:
        monkeypatch.setenv("TPO_RUNS", source)
    else:
        monkeypatch.delenv("TPO_RUNS", raising=False)
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path))  # no user kernelspec "python3": this interpreter's kernel
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(notebook, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    outputs = _outputs(notebook)
    assert not [o for o in outputs if o.output_type == "error"]
    assert _images(outputs) == 2  # the hero figure and the paired seeds
    text = _text(outputs)
    if source == "synthetic":
        assert "SYNTHETIC" in text
    else:
        assert "SYNTHETIC" not in text
        assert "runs from: results/runs/fig4_mnist results/runs/fig1b_sparse" in text
        assert "missing" not in text and "†" not in text  # every cell of both tables has its full 20 seeds


def test_committed_notebook_has_outputs():
    """The committed notebook shows the committed runs: executed, with its figures, so it is never committed blank
    (re-execute it with nbclient or `jupyter nbconvert --execute --inplace` after changing it; notebooks/README.md)."""
    assert NOTEBOOK.stat().st_size < MAX_BYTES
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert all(cell.get("execution_count") for cell in code), "a code cell was not executed"
    outputs = _outputs(notebook)
    assert not [o for o in outputs if o.output_type == "error"]
    assert _images(outputs) >= 1
    text = _text(outputs)
    assert "SYNTHETIC" not in text
    assert "runs from: results/runs/fig4_mnist results/runs/fig1b_sparse" in text
