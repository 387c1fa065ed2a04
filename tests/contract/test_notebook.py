"""docs/notebook.ipynb runs as a person would run it (a Jupyter kernel, top to bottom), so it cannot go stale: every
cell runs, the figures are drawn inline, and the numbers it shows are the run's."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parents[2] / "docs" / "notebook.ipynb"
PLOTLY = "application/vnd.plotly.v1+json"


@pytest.mark.slow
def test_the_notebook_runs_and_draws_its_figures(tmp_path: Path) -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    assert not any(cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code"), "outputs not stripped"
    NotebookClient(notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
                   ).execute()  # raises CellExecutionError with the cell and its traceback
    outputs = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs]
    figures = [output for output in outputs if PLOTLY in output.get("data", {})]
    assert len(figures) >= 5
    shown = [output["data"].get("text/plain", "") for output in outputs if "data" in output]
    assert "'2021-03-03'" in shown  # toy-date's output, as the cell shows it
    assert (tmp_path / "date.npz").is_file()  # saved where the notebook runs
