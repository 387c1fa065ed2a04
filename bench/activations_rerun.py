"""Rerun cost of the Activations page when a person changes a control: `python -m bench.activations_rerun`.

Drives the app headless with AppTest: BENCH_MODEL (minilm by default; smollm2 too) on a text of BENCH_TOKENS
(512) tokens. Each view is opened once (its own run of the model, and what it derives, cached), then RUNS reruns
that each change the view's control are timed around `AppTest.run()`. Output: one row per view with the median
and p90 in ms (target: median <= 100 ms), then the number of model runs (one per hook set, none on a change).
"""

from __future__ import annotations

import os
import statistics
import time

from streamlit.testing.v1 import AppTest

from attention_atlas.model.registry import load_runner
from bench.app_rerun import ROOT, count_runs, text_of

MODEL = os.environ.get("BENCH_MODEL", "minilm")
TOKENS = int(os.environ.get("BENCH_TOKENS", 512))
RUNS = 20
TARGET_MS = 100.0
MEASURES = ["‖attn_out‖: what attention writes", "‖residual‖ at each boundary"]
CHANGES = {  # view -> (kind of widget, key, the two values it alternates between)
    "Residual stream": ("selectbox", "activations_residual_measure", MEASURES),
    "FFN neurons": ("number_input", "activations_neuron", [1, 2]),
    "Norms": ("toggle", "activations_norm_log", [True, False]),
    "Logit lens": ("multiselect", "activations_lens_positions", [[0], [1, 2]]),
    "Trajectories": ("multiselect", "activations_traj_tokens", [[0, 1], [2, 3, 4]]),
    "Shapes": ("text_input", "activations_shape_filter", ["attn", "mlp"]),
}


def main() -> None:
    calls = count_runs()
    text = text_of(load_runner(MODEL).tokenizer, TOKENS)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    at.run()
    at.sidebar.selectbox(key="model_id").set_value(MODEL).run()
    at.sidebar.text_input(key="text").set_value(text).run()
    at.switch_page("app_pages/activations.py").run()
    print(f"{MODEL}, {len(at.session_state['trace'].tokens)} tokens")
    for view, (kind, key, values) in CHANGES.items():
        at.session_state["activations_view"] = view
        start = time.perf_counter()
        at.run()
        first = time.perf_counter() - start
        if at.exception or not [w for w in getattr(at, kind) if w.key == key]:
            print(f"{view:16} opened in {first * 1000:6.0f} ms; no control to change here")
            continue
        times = []
        for i in range(RUNS):
            getattr(at, kind)(key=key).set_value(values[i % 2])
            start = time.perf_counter()
            at.run()
            times.append((time.perf_counter() - start) * 1000)
        assert not at.exception, at.exception
        p90 = statistics.quantiles(times, n=10)[-1]
        print(f"{view:16} opened in {first * 1000:6.0f} ms; change: median {statistics.median(times):5.1f} ms, "
              f"p90 {p90:5.1f} ms (target {TARGET_MS:.0f})")
    print(f"model runs: {len(calls)} (the frame's, and one per view's hooks; none for a change)")


if __name__ == "__main__":
    main()
