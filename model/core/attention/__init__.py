"""Attention itself: pattern sources, their row reductions and the in-run summary, the native CPU kernel."""
