"""Streamlit pieces shared by the frame (app.py) and the pages: URL state, pickers, downloads."""
