"""Opening a page of the app in AppTest as a person would: a model (or a custom folder), a text, a link."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

CUSTOM = "custom"
TABBED = {"app_pages/attention.py": "view", "app_pages/masks.py": "masks_view",  # page -> the key of its tabs
          "app_pages/positions.py": "positions_view", "app_pages/activations.py": "activations_view",
          "app_pages/step_through.py": "step_view"}
LEAST_VIEWS = {page: 4 if page == "app_pages/step_through.py" else 6 for page in TABBED}  # a model's views at least


def open_app_page(page: str, model_id: str = "toy-date", text: str | None = None, folder: str | None = None,
                  params: dict[str, str] | None = None) -> AppTest:
    """The app opened through a link carrying `params`, on `model_id` (or the custom `folder`) with `text`, then
    switched to `page` ("app_pages/masks.py"); asserts that nothing raised."""
    at = AppTest.from_file("../../app.py", default_timeout=120)
    at.query_params.update(params or {})
    at.run()
    at.sidebar.selectbox(key="model_id").set_value(CUSTOM if folder else model_id).run()
    if folder:
        at.sidebar.text_input(key="custom_model").set_value(folder).run()
    if text is not None:
        at.sidebar.text_input(key="text").set_value(text).run()
    at.switch_page(page).run()
    assert not at.exception, at.exception[0].message if at.exception else ""
    return at


def assert_ok(at: AppTest, where: str) -> None:
    """Nothing raised and no error shown; `where` names the page or view in the failure."""
    assert not at.exception, f"{where}: {at.exception[0].message}"
    assert not at.error, f"{where}: {[e.value for e in at.error]}"


def open_every_view(at: AppTest, least: dict[str, int] | None = None) -> None:
    """Each view (tab) of every tabbed page opened in turn, each without an exception or an error; `least`: the
    fewest views a page must offer (page -> count)."""
    for page, key in TABBED.items():
        at.switch_page(page).run()
        views = [tab.label for tab in at.tabs]
        assert len(views) >= (least or {}).get(page, 1), page
        for view in views:
            at.session_state[key] = view
            at.run()
            assert_ok(at, f"{page} · {view}")
