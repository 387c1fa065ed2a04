"""CSV downloads in a real browser: the table makers the session keeps after the run (ui/downloads.py) still
give the matrix shown, on the Overview and on the Attention page's One head, Rollout and statistics tabs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from app_browser.page import open_page
from app_browser.server import ARTIFACTS


def download_csv(page, name: str) -> pd.DataFrame:
    """Click the main area's first CSV button and read the file."""
    with page.expect_download(timeout=60_000) as download:
        page.get_by_test_id("stMain").get_by_role("button", name="CSV", exact=True).first.click()
    path = ARTIFACTS / name
    download.value.save_as(path)
    return pd.read_csv(path, index_col=0)


@pytest.mark.opens(model="toy-copy", text="abcdef")
def test_csv_downloads_hold_the_matrices_shown(page) -> None:
    overview = download_csv(page, "overview.csv")  # (q_len, k_len): one head
    assert overview.shape == (7, 7) and list(overview.columns)[:2] == ["#0 a", "#1 b"]
    assert np.allclose(overview.to_numpy().sum(axis=1), 1.0, atol=1e-3)
    open_page(page, "Attention")
    for tab, rows in [("One head", 7), ("Rollout", 7), ("Head statistics", None)]:
        page.get_by_role("tab", name=tab).click()
        table = download_csv(page, f"attention-{tab.lower().replace(' ', '-')}.csv")
        if rows is not None:
            assert table.shape == (rows, 7)
            assert np.allclose(table.to_numpy().sum(axis=1), 1.0, atol=1e-3)
        else:
            assert table.shape[0] > 0 and table.notna().all().all()
    assert page.console_errors == []
