"""Why the pages live in app_pages/ and not pages/: Streamlit does not ignore a `pages/` folder beside the main
script, though the script calls `st.navigation` (its documentation says it then does). The first run of a script
goes through the old multipage mode, which lists that folder's scripts as pages of its own; when they are the
pages `st.navigation` is given, a rerun drops the sidebar's widgets. When a Streamlit release ignores the folder,
the test fails: the folder can then take the design's name, pages/."""

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

FRAME = """
import streamlit as st
page = st.navigation([st.Page("{folder}/home.py", title="Home"), st.Page("{folder}/other.py", title="Other")])
st.sidebar.selectbox("Model", ["a", "b"], key="model")
if st.session_state.model == "b" and "example" not in st.session_state:  # as the frame on a switch of model
    st.session_state.example = "its example"
    st.rerun()
st.sidebar.text_input("Text", key="text")
page.run()
"""


@pytest.mark.parametrize(("folder", "kept"), [("pages", False), ("app_pages", True)])
def test_a_pages_folder_loses_the_sidebar_on_a_rerun(tmp_path: Path, folder: str, kept: bool) -> None:
    (tmp_path / folder).mkdir()
    for page in ("home", "other"):
        (tmp_path / folder / f"{page}.py").write_text(f"import streamlit as st\nst.write('{page}')\n")
    (tmp_path / "app.py").write_text(FRAME.format(folder=folder))
    at = AppTest.from_file(str(tmp_path / "app.py"), default_timeout=30).run()
    assert [widget.key for widget in at.sidebar.text_input] == ["text"]
    at.sidebar.selectbox(key="model").set_value("b").run()
    assert not at.exception
    assert ([widget.key for widget in at.sidebar.text_input] == ["text"]) is kept
