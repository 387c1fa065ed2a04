"""The Train page's snapshot buttons after a thinning: the snapshot the page was drawn with may be let go of (every
other one goes past the limit, model/toy/live.py) before the person clicks. The button then opens the nearest snapshot
kept and says so, instead of failing."""

from __future__ import annotations

from tests.app.train_page import run, start, train_page, until_done


def test_a_snapshot_let_go_of_before_the_click_opens_the_nearest_kept_one() -> None:
    at = train_page()
    training = start(at, 150, 50)
    until_done(at, training)
    at.select_slider[0].set_value(50)
    run(at)
    assert at.button(key="train_open_snapshot").label == "Open the snapshot at step 50"
    training.snapshots = [s for s in training.snapshots if s.step != 50]  # a thinning, after the page was drawn
    at.button(key="train_open_snapshot").click()
    run(at)
    assert at.session_state["model_id"].startswith(f"trained-{training.recipe.task}-step0-")  # 0 and 100 as near
    assert [t.value for t in at.toast] == ["The snapshot at step 50 was let go as the run thinned its snapshots: the "
                                           "nearest kept, at step 0, opens instead."]


def test_compare_after_a_thinning_sets_the_nearest_kept_snapshot_beside_the_trained_model() -> None:
    at = train_page()
    training = start(at, 150, 50)
    until_done(at, training)
    at.select_slider[0].set_value(100)
    run(at)
    training.snapshots = [s for s in training.snapshots if s.step in (0, 150)]  # two thinnings: 150 the nearest
    at.button(key="train_compare").click()
    at.run()
    assert not at.exception, at.exception[0].message if at.exception else ""
    compared = at.session_state["attention_compare_model"]
    assert compared.startswith(f"trained-{training.recipe.task}-step150-"), compared
