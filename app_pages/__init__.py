"""The app's pages, one script each, run by Streamlit through `st.navigation` (ui/page.py lists them)."""
