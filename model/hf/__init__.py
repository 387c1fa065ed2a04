"""Hugging Face models through the same capture: hook taps per family, loading, the runner, packaged models."""
