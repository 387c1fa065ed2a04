"""The Trace, its hook names and sites, its attention view and summaries, and its file."""
