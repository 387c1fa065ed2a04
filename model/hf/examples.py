"""Texts to offer a person first, by model kind (the toy models have their own, from their task)."""

from __future__ import annotations

EXAMPLES = {
    "encoder": ("The cat sat on the mat because it was tired.", "The quick brown fox", "Paris is in France."),
    "decoder": ("The capital of France is", "Once upon a time, there was a", "def fibonacci(n):"),
    "encoder-decoder": ("The house is wonderful.", "translate English to German: Thank you.", "Hello world"),
}
