"""Runs on NDIF in the app (ui/ndif_runs.py): a run waited for has a Stop button, a stopped run says so and runs
again on a click; the shared cache keys a run sent to NDIF by a keyed hash of its key, never the key; a request a page
makes itself says NDIF's words where the page draws."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from attention_atlas.ui import ndif_runs


def page() -> None:
    """A page that waits for a run (key ("a run",)) through `stoppable`, counting the waits: the first is still under
    way when the script ends (as when a click reruns it), the others end with the trace."""
    import streamlit as st

    from attention_atlas.ui.ndif_runs import RunStopped, stoppable

    def wait() -> str:
        st.session_state["waits"] = st.session_state.get("waits", 0) + 1
        if st.session_state["waits"] == 1:
            st.stop()
        return "the trace"

    try:
        st.write(stoppable(("a run",), wait))
    except RunStopped as stopped:
        st.error(str(stopped))


def test_a_run_is_stopped_from_the_page_and_run_again() -> None:
    at = AppTest.from_function(page, default_timeout=30).run()
    stop = at.button(key="ndif_stop")  # beside the run while it is waited for
    assert stop.label == "Stop the run on NDIF" and at.session_state["waits"] == 1
    stop.click().run()
    assert at.error[0].value == "You stopped this run on NDIF. Change the text, or run it again."
    assert at.session_state["waits"] == 1  # not waited for again
    at.button(key="ndif_run_again").click().run()
    assert not at.error and at.session_state["waits"] == 2 and at.markdown[0].value == "the trace"
    assert not [button for button in at.button if button.key == "ndif_stop"]  # gone once the run is in


def test_a_run_sent_to_ndif_is_keyed_by_its_keys_hash_never_the_key(monkeypatch) -> None:
    typed: list[str | None] = [None]
    monkeypatch.setattr(ndif_runs, "typed_key", lambda: typed[0])
    monkeypatch.delenv("NDIF_API_KEY", raising=False)
    assert ndif_runs.key_identity("NDIF") == ("none",)
    assert ndif_runs.key_identity("NDIF, simulated") == () == ndif_runs.key_identity("cpu")  # no key: shared
    typed[0] = "secret-key-123"
    ours = ndif_runs.key_identity("NDIF")
    assert len(ours[0]) == 64 and "secret-key-123" not in str(ours)
    monkeypatch.setenv("NDIF_API_KEY", "another-key")
    assert ndif_runs.key_identity("NDIF") == ours  # the typed key first
    typed[0] = None
    assert ndif_runs.key_identity("NDIF") not in (ours, ("none",))  # the server's key: another run


def test_a_request_a_page_makes_says_ndifs_words_and_clears_them() -> None:
    def words_page() -> None:
        import streamlit as st

        from attention_atlas.model.ndif.status import tell
        from attention_atlas.ui.ndif_runs import page_words

        with page_words():
            tell("NDIF: queued (3 s)")
            if st.session_state.get("done"):
                tell("NDIF: completed")

    at = AppTest.from_function(words_page, default_timeout=30).run()
    assert [caption.value for caption in at.caption] == ["NDIF: queued (3 s)"]
    at.session_state["done"] = True
    at.run()
    assert not at.caption
