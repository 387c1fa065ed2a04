"""The Train page's views of a training run (model/toy/live.py): controls, progress, the curves, the timeline of
snapshots with every head on the probe example, the per-head scores, and what to do with the result."""

from __future__ import annotations

import numpy as np
import streamlit as st

from attention_atlas.model.core.trace.sites import Site
from attention_atlas.model.toy.archive import toy_archive
from attention_atlas.model.toy.head_scores import Score
from attention_atlas.model.toy.live import LiveTraining, Snapshot
from attention_atlas.ui.compare import ANOTHER_MODEL
from attention_atlas.ui.downloads import figure_label
from attention_atlas.ui.page import PAGES
from attention_atlas.ui.pickers import clicked_head, keep_valid
from attention_atlas.ui.session_models import add_session_model, open_model, still_listed
from attention_atlas.viz.heatmap import attention_heatmap
from attention_atlas.viz.thumbnails import thumbnail_figure, thumbnail_grid
from attention_atlas.viz.training import curve_chart, scores_chart

REFRESH_S = 1.0  # how often the live view redraws while the model trains (or the timeline plays)
THUMBNAIL = 48  # pixels a head in the grid
INDUCTION_THRESHOLD = 0.4  # the score above which a head is commonly called an induction head
ATTENTION_PAGE = next(page.file for page in PAGES if page.title == "Attention")
BEST = "best"  # the head picker's first choice: the head with the highest score, wherever it is
SCORES_HELP = ("The mean attention on the key a mechanism would read. induction: from each letter of the repeat to "
               "the letter after its first copy; previous token: to the token before; first token: to position 0; "
               "diagonal, anti-diagonal, alignment: from each output to the source character it comes from.")
STATUS_WORDS = {"running": "training", "paused": "paused", "evaluating": "checking it on held-out examples",
                "finished": "finished", "stopped": "stopped", "failed": "failed"}


def show_training(training: LiveTraining) -> None:
    """Controls and the timeline's play switch in one row, then the live view (redrawn every REFRESH_S while training
    runs or the timeline plays)."""
    with st.container(horizontal=True, vertical_alignment="center"):
        controls(training)
        playing = st.toggle("Play the timeline", key="train_play", help="Step through the snapshots, over and over.")
    refresh = REFRESH_S if playing or not training.done else None
    st.fragment(live_view, run_every=refresh)(training)


def controls(training: LiveTraining) -> None:
    """Pause (or resume) and stop, while the training is not done."""
    if training.done:
        return
    if training.status == "paused":
        st.button("Resume", icon=":material/play_arrow:", key="train_resume", on_click=training.resume)
    else:
        st.button("Pause", icon=":material/pause:", key="train_pause", on_click=training.pause)
    st.button("Stop", icon=":material/stop:", key="train_stop", on_click=training.stop,
              help="Stop now; the model trained so far becomes the result.")


def live_view(training: LiveTraining) -> None:
    """Progress, the timeline, the curves and scores with the chosen snapshot marked, the heads at that snapshot;
    the result once done."""
    if training.done and st.session_state.get("train_seen_done") != training.run_id:
        st.session_state["train_seen_done"] = training.run_id
        st.rerun()  # the whole page: the controls give way to the result, and the redrawing stops
    progress(training)
    snapshots = list(training.snapshots)
    if not snapshots:
        return
    site = choose_site(list(snapshots[-1].patterns))
    timeline_column, score_column = st.columns([3, 2], vertical_alignment="bottom")
    with timeline_column:
        forget_another_runs_timeline(training.run_id)
        snapshot = timeline(snapshots, training.snapshot_every)
    with score_column:
        score = choose_score(training, site)
    charts(training, snapshots, snapshot, score)
    best = best_head(snapshot, score) if score else (0, 0)
    heads(training, snapshot, site, score, best)
    if score is not None:
        st.caption(score_caption(snapshot, score, best))
    if training.done:
        result(training, snapshot)


def choose_site(sites: list[str]) -> str:
    """Which attention the heads are drawn from, where the model has several."""
    if len(sites) == 1:
        return sites[0]
    return st.radio("Attention", sites, key="train_site", horizontal=True, format_func=lambda s: Site.of(s).label)


def choose_score(training: LiveTraining, site: str) -> Score | None:
    """Which of the site's scores is followed (None where it has none)."""
    scores = {score.name: score for score in training.scores if score.site == site}
    keep_valid("train_score", list(scores) or [None])
    name = st.selectbox("Score", list(scores), key="train_score", help=SCORES_HELP) if scores else None
    return scores.get(name)


def charts(training: LiveTraining, snapshots: list[Snapshot], snapshot: Snapshot, score: Score | None) -> None:
    """Loss, token accuracy and the chosen score of every head over the steps, the snapshot's step marked."""
    step = training.step  # read once: the thread appends meanwhile
    steps = max(step, 1) if training.done else training.recipe.settings.steps  # the axis: to where it ended, or will
    columns = st.columns([1, 1, 1.4])
    loss = curve_chart("loss", training.losses[:step], snapshot.step, steps)
    columns[0].altair_chart(loss, key="train_loss", alt=figure_label(loss, csv=False))
    accuracy = curve_chart("token accuracy", training.accuracies[:step], snapshot.step, steps, (0.0, 1.0))
    columns[1].altair_chart(accuracy, key="train_accuracy", alt=figure_label(accuracy, csv=False))
    if score is not None:
        values = np.stack([s.scores[(score.name, score.site)] for s in snapshots])  # (snapshots, layers, heads)
        threshold = INDUCTION_THRESHOLD if score.name == "induction" else None
        scores = scores_chart([s.step for s in snapshots], values, score.name, snapshot.step, steps, threshold)
        columns[2].altair_chart(scores, key="train_scores", alt=figure_label(scores, csv=False))


def progress(training: LiveTraining) -> None:
    steps, step = training.recipe.settings.steps, training.step
    words = (f"{STATUS_WORDS[training.status]} · step {step:,} of {steps:,} · {training.seconds:.0f} s of training "
             f"· {training.parameters:,} parameters")
    st.progress(min(1.0, step / steps), text=words)
    if training.status == "failed":
        st.error(f"The training failed: {training.message}", icon=":material/error:")
    elif training.status == "stopped":
        st.info(f"The training {training.message}.", icon=":material/stop_circle:")


def forget_another_runs_timeline(run_id: str) -> None:
    """Where the timeline was left in the session's run before: a new run's timeline follows its newest snapshot."""
    if st.session_state.get("train_timeline_of") == run_id:
        return
    st.session_state["train_timeline_of"] = run_id
    for key in [key for key in st.session_state if str(key).startswith("train_snapshot_")]:
        del st.session_state[key]
    st.session_state.pop("train_follow", None)
    st.session_state.pop("train_shown", None)


def timeline(snapshots: list[Snapshot], snapshot_every: int) -> Snapshot:
    """The snapshot slider: it follows the newest snapshot until the person moves it elsewhere (its callback, which
    only a person's move calls, says whether they left it at the newest), and moves on by itself while the timeline
    plays. Its widget is keyed by its options (their count and the newest): a new snapshot or a thinning
    (model/toy/live.py) makes a new widget, so a browser that has not yet drawn the last run cannot send the old
    widget's value back as a move (a slider keeps the position of its value among its options, too)."""
    steps = [s.step for s in snapshots]
    key = f"train_snapshot_{len(steps)}_{steps[-1]}_{snapshot_every}"
    chosen = st.session_state.get(key, st.session_state.get("train_shown"))
    if st.session_state.get("train_play"):
        chosen = steps[(steps.index(chosen) + 1) % len(steps)] if chosen in steps else steps[0]
        st.session_state["train_follow"] = False  # once the play stops, the slider stays where it got to
    elif not isinstance(chosen, int) or st.session_state.get("train_follow", True):
        chosen = steps[-1]
    elif chosen not in steps:  # let go of in a thinning: the nearest one
        chosen = min(steps, key=lambda step: abs(step - chosen))
    st.session_state[key] = chosen
    value = st.select_slider("Snapshot at step", steps, key=key, on_change=_moved, args=(key, steps[-1]),
                             help="Every head's attention on the probe example at that step; the red line marks "
                                  "it on the curves.")
    st.session_state["train_shown"] = value
    return snapshots[steps.index(value)]


def _moved(key: str, newest: int) -> None:
    """The person moved the snapshot slider: it follows the newest snapshot again only if they left it there."""
    st.session_state["train_follow"] = st.session_state[key] == newest


def heads(training: LiveTraining, snapshot: Snapshot, site: str, score: Score | None,
          best: tuple[int, int]) -> None:
    """Every head of the site at the snapshot (click one to draw it large), and one head large."""
    patterns = snapshot.patterns[site]  # (layers, heads, q_len, k_len)
    layers, n_heads = patterns.shape[:2]
    queries, keys = training.probe_tokens[site]
    left, right = st.columns([2, 3])
    with left:
        clicked = clicked_head("train_grid", n_heads)
        if clicked is not None:
            st.session_state["train_head"] = clicked
        options = [BEST, *((layer, head) for layer in range(layers) for head in range(n_heads))]
        keep_valid("train_head", options)
        best_words = f"the highest {score.name} score" if score else "layer 0 · head 0"
        choice = st.selectbox("Head", options, key="train_head", help="Or click a head in the grid below.",
                              format_func=lambda h: best_words if h == BEST else f"layer {h[0]} · head {h[1]}")
        assert choice is not None  # a picker with a default (its first option) always holds a choice
        grid = thumbnail_grid(list(patterns), THUMBNAIL, training.probe_masks[site])
        thumbnails = thumbnail_figure(grid, THUMBNAIL)
        st.plotly_chart(thumbnails, key="train_grid", on_select="rerun", selection_mode="points",
                        config={"displayModeBar": False},  # a picker: nothing to zoom
                        alt=figure_label(thumbnails, csv=False, about=f"Every head at step {snapshot.step:,}"))
        st.caption(f"Every head at step {snapshot.step:,}: click one to draw it large.")
    with right:
        layer, head = best if choice == BEST else choice
        title = f"layer {layer} · head {head} at step {snapshot.step:,}"
        if score is not None:
            title += f" · {score.name} score {snapshot.scores[(score.name, site)][layer, head]:.2f}"
        pattern = attention_heatmap(patterns[layer, head], queries, keys, title, masked=~training.probe_masks[site],
                                    height=420)
        st.plotly_chart(pattern, key="train_head_pattern", alt=figure_label(pattern, csv=False))


def best_head(snapshot: Snapshot, score: Score) -> tuple[int, int]:
    values = snapshot.scores[(score.name, score.site)]  # (layers, heads)
    layer, head = np.unravel_index(int(np.argmax(values)), values.shape)
    return int(layer), int(head)


def score_caption(snapshot: Snapshot, score: Score, best: tuple[int, int]) -> str:
    value = float(snapshot.scores[(score.name, score.site)][best])
    words = (f"At step {snapshot.step:,} the head with the highest {score.name} score is layer {best[0]} · head "
             f"{best[1]}: {value:.2f} of its attention, on average, goes where the score looks (over "
             f"{len(score.queries)} query positions of the probe example).")
    if score.name == "induction":
        words += f" Above {INDUCTION_THRESHOLD} (dashed) a head is commonly called an induction head."
    return words


def result(training: LiveTraining, snapshot: Snapshot) -> None:
    """Open the trained model or the chosen snapshot in the app, compare them, download either."""
    final = training.result
    if final is None:
        return
    exact = final.training["validation_exact_match"]
    st.success(f"The model after {final.training['steps']:,} steps gets {exact:.0%} of "
               f"{training.validation_examples} held-out examples exactly right. Open it, or the snapshot chosen "
               "above, on every page: it is then listed in the sidebar for this session.",
               icon=":material/check_circle:")
    left, middle, right = st.columns(3)
    name = training.recipe.task
    if left.button("Open the trained model", key="train_open_final", on_click=open_listed,
                   args=(training, "final"), icon=":material/open_in_new:"):
        st.rerun()  # the whole app: the sidebar shows the model
    left.download_button("Download it (.zip)", lambda: toy_archive(final, name), f"{name}.zip",
                         mime="application/zip", key="train_download_final", icon=":material/download:")
    if snapshot.weights is None:
        middle.caption("The snapshots' weights were not kept (the model is too large for that): only the trained "
                       "model opens.")
        return
    if middle.button(f"Open the snapshot at step {snapshot.step:,}", key="train_open_snapshot",
                     on_click=open_listed, args=(training, snapshot.step), icon=":material/history:"):
        st.rerun()
    middle.download_button("Download it (.zip)", lambda: toy_archive(training.snapshot_model(snapshot),
                                                                     f"{name}-step{snapshot.step}"),
                           f"{name}-step{snapshot.step}.zip", mime="application/zip",
                           key="train_download_snapshot", icon=":material/download:")
    if right.button("Compare the two on the Attention page", key="train_compare", on_click=compare_listed,
                    args=(training, snapshot.step), icon=":material/compare:",
                    help="Opens the trained model there, with this snapshot as the other model of its Compare view."):
        st.switch_page(ATTENTION_PAGE)
    if notice := st.session_state.pop("train_notice", None):  # after the buttons: a click's rerun comes first
        st.toast(notice, icon=":material/history:")


def listed(training: LiveTraining, which: int | str) -> str:
    """The session model id of the trained model ("final") or of the snapshot at step `which`, listed once; a snapshot
    a thinning let go of since the page was drawn gives way to the nearest one kept, and the page's next run says so
    (`result`: a callback's own toast would go with the rerun that follows it)."""
    ids = still_listed("train_listed")  # (run id, final or step) -> model id
    if which == "final":
        key = (training.run_id, which)
        if key not in ids:
            ids[key] = add_session_model(training.recipe.task, training.result)
        return ids[key]
    snapshot = kept_snapshot(training.snapshots, int(which))
    if snapshot.step != which:
        st.session_state["train_notice"] = (f"The snapshot at step {which:,} was let go as the run thinned its "
                                            f"snapshots: the nearest kept, at step {snapshot.step:,}, opens instead.")
    key = (training.run_id, snapshot.step)
    if key not in ids:
        ids[key] = add_session_model(f"{training.recipe.task}-step{snapshot.step}", training.snapshot_model(snapshot))
    return ids[key]


def kept_snapshot(snapshots: list[Snapshot], step: int) -> Snapshot:
    """The snapshot at `step`, or where a thinning let it go since the page was drawn (model/toy/live.py), the
    nearest one kept (the earlier of two as near)."""
    return min(snapshots, key=lambda snapshot: (abs(snapshot.step - step), snapshot.step))


def open_listed(training: LiveTraining, which: int | str) -> None:
    """A button's callback: the trained model or a snapshot becomes the sidebar's model."""
    open_model(listed(training, which))


def compare_listed(training: LiveTraining, step: int) -> None:
    """The compare button's callback: the trained model in the sidebar, the snapshot as Compare's other model."""
    snapshot_id = listed(training, step)
    st.session_state.pop("train_notice", None)  # the Compare view names the snapshot with its step
    open_model(listed(training, "final"))
    st.session_state["view"] = "Compare"
    st.session_state["attention_compare_kind"] = ANOTHER_MODEL
    st.session_state["attention_compare_model"] = snapshot_id
