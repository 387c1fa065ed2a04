"""The Train page's choices outlive a visit to another page (its `keeps` in ui/page.py's PAGES)."""

from __future__ import annotations

from tests.app.train_page import PAGE, train_page


def test_the_forms_choices_survive_a_visit_to_another_page() -> None:
    at = train_page()
    at.selectbox(key="train_task").set_value("reverse")
    at.run()
    at.number_input(key="train_steps").set_value(1234)
    at.run()
    at.switch_page("app_pages/overview.py")
    at.run()
    at.switch_page(PAGE)
    at.run()
    assert (at.selectbox(key="train_task").value, at.number_input(key="train_steps").value) == ("reverse", 1234)
    assert not at.exception
