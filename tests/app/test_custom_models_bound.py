"""ui/runs.py keeps at most MAX_CUSTOM_MODELS custom folders loaded: a third folder lets go of the one used least
recently (a server must not keep every folder anyone typed); the shipped models do not count."""

import gc

from attention_atlas.ui import runs


def test_a_third_custom_folder_unloads_the_least_recently_used(folders) -> None:
    assert runs.MAX_CUSTOM_MODELS == 2
    runs._custom_runner.clear()
    first, second, third = (str(folders[family]) for family in ("gpt2", "bert", "t5"))
    loaded = runs.get_runner(first, "cpu")
    runs.get_runner(second, "cpu")
    assert runs.get_runner(first, "cpu") is loaded  # kept: not loaded again
    del loaded
    runs.get_runner("toy-copy", "cpu")
    runs.get_runner(second, "cpu")  # now the first folder is the least recently used
    runs.get_runner(third, "cpu")
    gc.collect()  # a model's modules hold reference cycles
    assert [runs.is_loaded(folder, "cpu") for folder in (first, second, third)] == [False, True, True]
    assert runs.is_loaded("toy-copy", "cpu")
    again = runs.get_runner(first, "cpu")  # loaded anew when asked again, and works
    assert again.run("hello world").tokens
    gc.collect()
    assert [runs.is_loaded(folder, "cpu") for folder in (first, second, third)] == [True, False, True]


def test_spread_loads_count_as_custom_models_whatever_the_model() -> None:
    """Each memory budget typed for a shipped model loads it anew: those copies are bounded as custom folders are."""
    runs._custom_runner.clear()
    shipped = runs.get_runner("minilm", "cpu")
    budgets = ("cpu=8GiB", "cpu=9GiB", "cpu=10GiB")
    for memory in budgets:
        assert runs.get_runner("minilm", "spread", memory=memory) is not shipped
    gc.collect()
    assert [runs.is_loaded("minilm", "spread", memory=memory) for memory in budgets] == [False, True, True]
    assert runs.get_runner("minilm", "cpu") is shipped  # the shipped model on one device stays
