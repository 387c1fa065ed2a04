"""The app's pages, one script each, run by Streamlit through `st.navigation` (ui/page.py lists them)."""

if __name__ != "attention_atlas.app_pages":  # the folder is also reachable from the repository root as `app_pages`
    raise ImportError("app_pages/ is the package attention_atlas.app_pages: import it by that name "
                      "(one copy of each module)")
