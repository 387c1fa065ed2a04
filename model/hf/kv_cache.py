"""A causal LM's KV cache handed to it, under the name its transformers gives the argument: `cache` (transformers 5),
`past_key_values` before."""

from __future__ import annotations

import inspect
from functools import cache
from typing import Any

from torch import nn


def cache_argument(model: nn.Module, kv_cache: Any) -> dict[str, Any]:
    """The keyword argument that hands `kv_cache` to `model`'s forward pass or `generate`."""
    return {_keyword(type(model)): kv_cache}


@cache
def _keyword(model_class: type) -> str:
    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


def returned_cache(output: Any) -> Any:
    """The KV cache a forward pass returned (a transformers ModelOutput), None if it kept none."""
    return output.get("cache", output.get("past_key_values"))
