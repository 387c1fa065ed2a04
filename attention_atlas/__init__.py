"""The installed app: `attention-atlas` (attention_atlas/cli.py) starts Streamlit on the frame.

`app.py` and `.streamlit/` here are links to the repository's `app.py` (the frame Streamlit runs) and its
Streamlit config: one copy of each in the repository, real files in a built wheel, found beside this
package wherever it is installed.
"""
