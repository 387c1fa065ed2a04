"""The fuzz layer's Hypothesis profiles: "ci" (make test: derandomized, so every run tries the same inputs; no
database; a few hundred examples across the layer) and "deep" (ATLAS_FUZZ=deep: twenty times as many, drawn afresh
each run). Each test holds its examples to a second of CPU time itself (tests/fuzz/outcomes.py), so Hypothesis's
own deadline, on the clock, which retries a slow example and calls a fast retry flaky, is off. The outcomes of each
test are printed at the end of a run in one process (`-p no:xdist`)."""

from __future__ import annotations

from hypothesis import HealthCheck, settings

from tests.fuzz.outcomes import COUNTS, PROFILE

_SHARED = {"database": None, "deadline": None, "print_blob": True,
           "suppress_health_check": (HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example)}
settings.register_profile("ci", derandomize=True, **_SHARED)
settings.register_profile("deep", derandomize=False, **_SHARED)
settings.load_profile(PROFILE)


def pytest_terminal_summary(terminalreporter) -> None:
    """Each fuzz test's examples by outcome (the figures docs/robustness.md records)."""
    if not any(COUNTS.values()):
        return
    terminalreporter.section(f"fuzz outcomes (profile {PROFILE})")
    for test, counts in COUNTS.items():
        if counts:  # a test not run this time counts nothing
            terminalreporter.write_line(f"{test}: " + ", ".join(f"{outcome} {n:,}" for outcome, n in counts.items()))
