"""Activation patching and gradients on NDIF, simulated (model/ndif/patches.py): every kind's patched runs and
attribution patching's estimate equal the local model's; a batch past a request's rows goes in several requests;
what cannot cross the wire is refused in a sentence."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from attention_atlas.model.core.capture.patching import Patch
from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.core.text_checks import validate_text
from attention_atlas.model.hf.loading import load_hf_runner
from attention_atlas.model.inspect.patching import attribution_patching, patch
from attention_atlas.model.ndif import runner as ndif_runner
from attention_atlas.model.ndif.opening import open_ndif
from attention_atlas.model.ndif.status import following

pytestmark = pytest.mark.slow  # opening a model on NDIF builds and probes its twin and loads nnsight: seconds
TEXTS = ("the quick brown fox", "the lazy brown dog", " jumps", " over")  # clean, corrupted, answer, wrong
TOLERANCE = 1e-4


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_patching_and_its_estimate_on_ndif_equal_the_local_models(folders, family) -> None:
    ndif, local = open_ndif(str(folders[family]), simulate=True), load_hf_runner(str(folders[family]))
    for make in (patch, attribution_patching):
        ours, theirs = make(ndif, *TEXTS), make(local, *TEXTS)
        assert (ours.clean, ours.corrupted) == pytest.approx((theirs.clean, theirs.corrupted), abs=TOLERANCE)
        assert set(ours.results) == {"resid_pre", "attn_out", "mlp_out", "head_out"} == set(theirs.results)
        for kind, values in theirs.results.items():
            assert np.isfinite(values).all() and np.abs(ours.results[kind] - values).max() <= TOLERANCE, kind
        assert np.abs(theirs.results["head_out"] - theirs.corrupted).max() > 1e-3  # the patches change the runs


def test_a_batch_past_a_requests_rows_goes_in_several_and_what_cannot_cross_is_said(folders, monkeypatch) -> None:
    ndif, local = open_ndif(str(folders["llama"]), simulate=True), load_hf_runner(str(folders["llama"]))
    options = RunOptions(hooks=("*.hook_resid_pre", "*.attn.hook_z"))
    clean, corrupted = (ndif.run(text, None, options) for text in TEXTS[:2])
    rows = [Patch("decoder.1.hook_resid_pre", position=p) for p in range(len(clean.ids))] + \
        [None, Patch("decoder.0.attn.hook_z", head=3)]
    monkeypatch.setattr(ndif_runner, "MAX_ROWS", 3)
    told: list[str] = []
    with following(told.append):
        ours = ndif.patched_outcomes(corrupted, clean.captured, rows)
    assert told.count("NDIF: completed") == -(-len(rows) // 3)  # rows in requests of 3
    local_clean, local_corrupted = (local.run(text, None, options) for text in TEXTS[:2])
    theirs = local.patched_outcomes(local_corrupted, local_clean.captured, rows)
    assert ours.positions == theirs.positions and np.abs(ours.values - theirs.values).max() <= TOLERANCE
    with pytest.raises(UserError, match="is neither"):
        ndif.gradients(corrupted, ["decoder.0.attn.hook_q"], len(corrupted.ids) - 1, lambda logits: logits[0])
    with pytest.raises(UserError, match="NDIF's servers do not have"):  # a metric that names this project's code
        ndif.gradients(corrupted, ["decoder.0.hook_resid_pre"], len(corrupted.ids) - 1, validate_text)
    with pytest.raises(UserError, match="read the prediction after token 4, not 2"):
        ndif.gradients(corrupted, ["decoder.0.hook_resid_pre"], 2, lambda logits: logits[0])
    with pytest.raises(UserError, match="under the mask it was trained with"):  # a padded run: not as NDIF reads it
        ndif.patched_outcomes(replace(corrupted, options=RunOptions(pad_to=8)), clean.captured, [None])
