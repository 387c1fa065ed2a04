"""docs/models.md's table of types tested, the rows after the core families and tests/tiny_hf.py TYPES (which
tests/model/test_model_types.py checks): each type of the other tiny builders (sinks, chunks and NoPE, latent
attention, hybrids) as the app describes the model it opened, one load and one run each."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from attention_atlas.model.hf.families import description
from attention_atlas.model.hf.loading import load_hf_runner
from tests.tiny_hf import FAMILIES, MLA_TYPES, TYPES, build_type
from tests.tiny_hybrids import HYBRID_TYPES, build_hybrid
from tests.tiny_llama4 import build_llama4
from tests.tiny_sinks import build_gpt_oss

MODELS_DOC = Path(__file__).parents[2] / "docs" / "models.md"
BUILDERS: dict[str, Callable[[Path], Path]] = {  # model type -> what saves its tiny random model into a folder
    "gpt_oss": build_gpt_oss,
    "llama4_text": build_llama4,
    **{t: lambda folder, t=t: build_type(t, folder) for t in MLA_TYPES},
    **{t: lambda folder, t=t: build_hybrid(t, folder) for t in HYBRID_TYPES},
}


@pytest.fixture(scope="module")
def found(tmp_path_factory) -> dict[str, dict[str, str]]:
    """Model type -> its row's cells, from the app's facts of the loaded model and one run (whether its attention
    layers have learned sinks)."""
    root = tmp_path_factory.mktemp("table")
    cells = {}
    for model_type, build in BUILDERS.items():
        runner = load_hf_runner(str(build(root / model_type)))
        trace = runner.run("the cat sat on the mat")
        sinks = any(trace.pattern_source("decoder.attn", layer).sinks is not None
                    for layer in range(trace.n_layers("decoder.attn")))
        cells[model_type] = description(runner.facts, runner.family, sinks=sinks)
    return cells


def test_the_docs_table_lists_the_other_builders_types_as_the_app_finds_them(found) -> None:
    expected = [f"| `{t}` | " + " | ".join(cells.values()) + " |" for t, cells in found.items()]
    rows = [line for line in MODELS_DOC.read_text(encoding="utf-8").splitlines() if line.startswith("| `")]
    assert rows[len(FAMILIES) + len(TYPES):] == expected, "\n".join(expected)


def test_the_rows_say_what_each_type_does_its_own_way(found) -> None:
    """The attention column names the sink, the chunks and NoPE, the latent and every hybrid's layer map."""
    assert "learned sinks" in found["gpt_oss"]["attention"]
    assert "chunked, NoPE layers" in found["llama4_text"]["attention"]
    assert all(found[t]["attention"].startswith("multi-head latent (MLA)") for t in MLA_TYPES)
    assert all("layer map: layer" in found[t]["attention"] for t in HYBRID_TYPES)
    assert not any("learned sinks" in cells["attention"] for t, cells in found.items() if t != "gpt_oss")
