"""Streamlit pieces shared by the frame (app.py) and the pages: URL state, pickers, downloads."""

if __name__ != "attention_atlas.ui":  # the folder is also reachable from the repository root as `ui`
    raise ImportError("ui/ is the package attention_atlas.ui: import it by that name "
                      "(one copy of each module)")
