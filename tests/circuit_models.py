"""The tiny random GPT-2 and Llama (grouped-query) models the circuit tests hold to the EAP-IG library's numbers
(tests/data/eap_ig_reference.json, written by tests/eap_ig_reference.py): 3 layers of 4 heads, every weight drawn
again from a seeded generator (norm gains about 1, biases nonzero), so they do not depend on how transformers
initialises a model; and the IOI-style prompt pair both read."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import transformers

from tests.tiny_hf import build

FAMILIES = ("gpt2", "llama")
LAYERS = {"gpt2": {"n_layer": 3}, "llama": {"num_hidden_layers": 3}}  # 4 heads each; Llama: 2 key/value heads
SEED = 55
CLEAN = "the cat sat on the mat a dog sat on the"
CORRUPTED = "the fox sat on the mat a dog sat on the"
ANSWER, WRONG = "cat", "fox"


def build_circuit_model(family: str, folder: Path) -> Path:
    """Save the tiny `family` model and its tokenizer into `folder`, its weights drawn from SEED."""
    build(family, folder, **LAYERS[family])
    return redraw(folder)


def redraw(folder: Path) -> Path:
    """Draw every weight of the causal LM saved in `folder` again from SEED (in the order of their names) and save it:
    norm gains in [0.5, 1.5), biases N(0, 0.1²), the rest N(0, 0.2²)."""
    model = transformers.AutoModelForCausalLM.from_pretrained(folder)
    generator = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, parameter in sorted(model.named_parameters()):
            if ("norm" in name or ".ln" in name) and name.endswith("weight"):
                drawn = torch.rand(parameter.shape, generator=generator) + 0.5
            elif name.endswith("bias"):
                drawn = torch.randn(parameter.shape, generator=generator) * 0.1
            else:
                drawn = torch.randn(parameter.shape, generator=generator) * 0.2
            parameter.copy_(drawn)
    model.save_pretrained(folder)
    return folder


def fingerprint(model: torch.nn.Module) -> dict[str, float]:
    """Three numbers of every weight (each tensor once, by name): their sum, their sum of squares, and their sum
    against a fixed sine wave; equal weights give equal numbers (float64, to 1e-9 relative)."""
    values = np.concatenate([p.detach().double().flatten().numpy() for _, p in sorted(model.named_parameters())])
    wave = np.sin(np.arange(len(values)) * 0.001)
    return {"sum": float(values.sum()), "squares": float((values**2).sum()), "wave": float(values @ wave),
            "count": float(len(values))}
