"""Heads named by what they do (model/core/trace/head_roles.py), held to shares computed here from the patterns
themselves (numpy, each layer's float32 pattern), never from the summary's statistics: SmolLM2's sinks and
previous-token heads on about 2,000 tokens of English, its induction heads on random words said twice, toy-induction's
induction head; and the summary's new measures equal whichever way a block is reduced (the native kernel or torch)."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from attention_atlas.model.core.attention import native
from attention_atlas.model.core.attention.row_reduction import ROLE_FROM, STATISTICS, induction_targets
from attention_atlas.model.core.attention.summary import summarise
from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.core.trace import head_roles
from attention_atlas.model.core.trace.kept_masks import compact
from attention_atlas.model.core.trace.summaries import summarise_site
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.registry import load_runner

SITE = "decoder.attn"
SUMMARISED = RunOptions(hooks=("*.hook_pattern",), summarised=True)
SENTENCES = (
    "The river ran high after three days of rain, and the old bridge groaned under the weight of the water.",
    "She opened the letter slowly, read it twice, and then folded it into a small square.",
    "Most of the village was still asleep when the baker lit the first fire of the morning.",
    "A good map tells you where the roads go; a better one tells you where they used to go.",
    "The committee met on Tuesday to argue about the budget, the roof, and the missing chairs.",
    "He had never seen snow before, so he stood at the window for an hour and said nothing.",
    "Trains from the north were late again, because a tree had fallen across the line near the lake.",
    "Her grandmother kept bees, grew beans, and wrote long letters to newspapers that never printed them.",
    "When the lights went out, the children told stories until the candles burned down.",
    "The museum closes early on Sundays, but the garden behind it stays open until dark.",
    "Nobody remembered who had planted the oak, only that it was older than the church.",
    "In the spring the fields turned green, and the farmers argued about the price of seed.",
    "The doctor listened to his chest, frowned, and told him to come back in a week.",
    "They walked along the coast for two days, sleeping in barns and eating bread and cheese.",
    "A small boat appeared on the horizon just as the sun was going down behind the hills.",
    "The teacher wrote a single word on the board and asked the class what it meant.",
    "Every winter the pond froze, and every winter someone fell through the thin ice near the reeds.",
    "The market was loud with the voices of sellers, the smell of fish, and the ringing of bells.",
    "His brother fixed clocks for a living and could not stand to be even a minute late.",
    "After the storm the beach was covered with shells, seaweed, and pieces of broken wood.",
)


def english(runner, tokens: int = 2000) -> str:
    """At least `tokens` tokens of English, a sentence more at most: the sentences, each pass over them in another
    seeded order."""
    rng, said = random.Random(0), []
    while len(runner.text.encode(" ".join(said))) < tokens:
        order = list(SENTENCES)
        rng.shuffle(order)
        for sentence in order:
            said.append(sentence)
            if len(runner.text.encode(" ".join(said))) >= tokens:
                break
    return " ".join(said)


def random_words_twice(runner, count: int = 300) -> str:
    """`count` distinct words drawn (seeded) from the tokenizer's whole lowercase words of 4 letters or more (one token
    each, after a space), said twice."""
    vocabulary = sorted(word[1:] for word in runner.tokenizer.get_vocab()
                        if word.startswith("Ġ") and word[1:].isalpha() and word[1:].islower() and len(word) >= 5)
    words = random.Random(0).sample(vocabulary, count)
    return "".join(" " + word for word in words * 2)


def shares(trace, layer: int, rows: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """(heads,): each head's mean over the query `rows` of its attention on the key keys[r] of each, from the
    layer's float32 pattern."""
    pattern = trace.pattern_source(SITE, layer).pattern(rows=rows, dtype=np.float32)  # (heads, rows, k_len)
    return pattern[:, np.arange(len(rows)), keys].astype(np.float64).mean(-1)


def roles_by_head(trace) -> dict[tuple[int, int], str]:
    table = trace.head_roles()
    return {(row.layer, row.head): row.role for row in table.itertuples() if row.site == SITE}


@pytest.fixture(scope="module")
def smollm2():
    return load_runner("smollm2")


@pytest.mark.slow
def test_smollm2s_sinks_and_previous_token_heads_on_2000_tokens_of_english(smollm2) -> None:
    """Every head that gives at least 0.8 of its attention (queries from 16 on) to the first token is a sink, every
    one that gives at least 0.6 to the previous token a previous-token head, and no head named so gives less."""
    trace = smollm2.run(english(smollm2), options=SUMMARISED)
    n = len(trace.tokens)
    assert 2000 <= n <= 2030
    table = trace.head_roles()
    rows = np.arange(ROLE_FROM, n)
    first, previous = (np.stack([shares(trace, layer, rows, keys) for layer in range(trace.n_layers(SITE))])
                       for keys in (np.zeros_like(rows), rows - 1))  # (layers, heads) each
    roles = table.pivot(index="layer", columns="head", values="role").to_numpy()  # (layers, heads)
    np.testing.assert_array_equal(roles == "sink", first >= head_roles.SINK)
    np.testing.assert_array_equal(roles == "previous token", previous >= head_roles.PREVIOUS)
    assert (first >= head_roles.SINK).sum() >= 3 and (previous >= head_roles.PREVIOUS).sum() >= 2  # some of each
    measured = table.pivot(index="layer", columns="head", values=["to first token", "to previous token"]).to_numpy()
    np.testing.assert_allclose(measured, np.concatenate([first, previous], 1), atol=1e-5)  # the shares shown


@pytest.mark.slow
def test_smollm2s_induction_heads_on_300_random_words_said_twice(smollm2) -> None:
    """Every head whose second half gives at least 0.5 of its attention to the token after the query's earlier
    occurrence (position i - 300 + 1) is an induction head; the share shown is that share (each word one token, so
    the queries with a target are the second half's)."""
    trace = smollm2.run(random_words_twice(smollm2), options=SUMMARISED)
    n = len(trace.tokens)
    assert n == 600
    rows = np.arange(300, n)
    second_half = np.stack([shares(trace, layer, rows, rows - 300 + 1) for layer in range(trace.n_layers(SITE))])
    table = trace.head_roles()
    roles = table.pivot(index="layer", columns="head", values="role").to_numpy()
    assert (second_half >= head_roles.INDUCTION).sum() >= 1  # the model has an induction head
    assert (roles[second_half >= head_roles.INDUCTION] == "induction").all()
    measured = table.pivot(index="layer", columns="head", values="induction").to_numpy()
    np.testing.assert_allclose(measured, second_half, atol=1e-5)


def test_toy_inductions_induction_head_is_named_induction() -> None:
    """toy-induction on distinct letters said twice: L1H2, the head whose repeat attends to the token after the
    query's earlier copy, is named induction, with that share; L0's look at the previous token or rest."""
    runner = load_runner("toy-induction")
    trace = runner.run("qwertyuiopas", None, RunOptions(hooks=("*.hook_pattern",)))  # it writes the repeat itself
    assert trace.tokens[1:] == list("qwertyuiopas" * 2)
    table = trace.head_roles().set_index(["layer", "head"])
    assert table.loc[(1, 2), "role"] == "induction"
    repeat = np.arange(13, len(trace.tokens))  # <s> at 0: the second copy's letters
    expected = trace.pattern(SITE, 1)[2, repeat, repeat - 12 + 1].astype(np.float64).mean()
    assert table.loc[(1, 2), "induction"] == pytest.approx(expected, abs=1e-3)  # (float16 pattern)
    assert expected > head_roles.INDUCTION


@pytest.mark.parametrize("model", ["smollm2", "minilm", "llama", "bart"])
def test_the_new_measures_are_equal_either_way_a_block_is_reduced(model, runners, monkeypatch) -> None:
    """The later queries' shares, the induction share and the distance off the first token, from the native kernel's
    blocks and from torch's, and against the patterns: SmolLM2 (the kernel making its own scores), MiniLM
    (bidirectional), a tiny llama (grouped query heads), a tiny BART (an encoder-decoder's three sites:
    cross-attention measures no positions)."""
    if native.attention_rows() is None:
        pytest.skip("no C compiler here: the native kernel is not built")
    runner = load_runner(model) if model in ("smollm2", "minilm") else runners[model]
    text = "the cat sat on the mat and the cat sat on the hat, " * 4
    target = text if model == "bart" else None  # the decoder reads the text too (teacher-forced): its repeats
    trace = runner.run(text, target, RunOptions(hooks=("*.hook_pattern",)))
    kernel = {site: summarise_site(trace, site).statistics for site in trace.sites()}
    monkeypatch.setattr(native, "attention_rows", lambda: None)
    for site in trace.sites():
        torch_ops = summarise_site(trace, site).statistics
        new = slice(5, len(STATISTICS))
        np.testing.assert_array_equal(np.isnan(kernel[site][..., new]), np.isnan(torch_ops[..., new]))
        np.testing.assert_allclose(kernel[site][..., new], torch_ops[..., new], rtol=1e-5, atol=1e-6)
        cross = "cross" in site
        assert np.isnan(kernel[site][..., 6:]).all() == cross
        if cross:
            continue
        ids = trace.query_ids(site)
        targets = induction_targets(ids)
        rows = np.flatnonzero(targets >= 0)
        assert len(rows) >= 16
        start = min(ROLE_FROM, len(ids) // 2)
        for layer in range(trace.n_layers(site)):
            p = trace.pattern_source(site, layer).pattern(dtype=np.float32).astype(np.float64)
            later, i = np.arange(max(start, 1), len(ids)), np.arange(len(ids))
            off_first = (p * np.abs(i[:, None] - i[None, :]))[..., 1:].sum(-1).mean(-1)
            expected = np.stack([p[:, start:, 0].mean(-1), p[:, later, later - 1].mean(-1),
                                 p[:, rows, targets[rows]].mean(-1), off_first], -1)
            np.testing.assert_allclose(kernel[site][layer, :, new], expected, rtol=1e-5, atol=1e-6)


def test_induction_targets_are_the_tokens_after_the_last_earlier_occurrence() -> None:
    """a b c a b b d a: the second a (3) looks at 1, the token after the first; the second b (4) at 2; the third b
    (5) follows a b, itself the target (no target); the last a (7) at 4, after the a at 3."""
    assert induction_targets([1, 2, 3, 1, 2, 2, 4, 1]).tolist() == [-1, -1, -1, 1, 2, -1, -1, 4]


def test_each_rule_names_the_head_made_to_do_what_it_says() -> None:
    """Patterns made by hand over 64 tokens, a text of 32 ids said twice, under the causal mask: each head does one
    thing, and the rules name it so; a head that does none of them is mixed."""
    n = 64
    ids = list(range(32)) * 2
    targets = induction_targets(ids)  # the second half's: the token after the first copy
    i = np.arange(n)
    heads = np.zeros((8, n, n))
    heads[0, :, 0] = 1  # sink
    heads[1, i, np.maximum(i - 1, 0)] = 1  # previous token
    heads[2, i, np.where(targets >= 0, targets, 0)] = 1  # induction (the first half resting on the first token)
    heads[3, i, i] = 1  # self
    for query in i:  # local: evenly over the three keys before
        heads[4, query, max(query - 3, 0) : max(query, 1)] = 1 / len(range(max(query - 3, 0), max(query, 1)))
        seen = [key for key in (5, 20, 40) if key <= query] or [0]  # vertical: three keys, once seen
        heads[5, query, seen] = 1 / len(seen)
        heads[6, query, : query + 1] = 1 / (query + 1)  # broad: evenly over every key seen
    heads[7, i, 0] += 0.5  # mixed: half on the first token, half on the middle of the text before
    heads[7, i, i // 2] += 0.5
    summary = summarise([iter([(i, torch.from_numpy(heads.astype(np.float32)))])], heads.shape, 64, True, ids)
    table = head_roles.site_roles(SITE, summary, np.tril(np.ones((n, n), dtype=bool)), ids)
    assert table.role.tolist() == ["sink", "previous token", "induction", "self", "local", "vertical", "broad",
                                   "mixed"]
    shown = table.set_index("role")
    assert shown.loc["sink", "to first token"] == 1.0 and shown.loc["previous token", "to previous token"] == 1.0
    assert shown.loc["induction", "induction"] == 1.0 and shown.loc["self", "to itself"] == 1.0
    assert shown.loc["vertical", "vertical"] == pytest.approx(1.0)
    assert shown.loc["broad", "spread"] == pytest.approx(1.0)
    assert shown.loc["local", "distance off first token"] == pytest.approx(2.0, abs=0.1)  # 1, 2, 3 tokens back
    assert [shown.loc[role, "measure"] for role in head_roles.ROLE_MEASURE] == list(head_roles.MEASURES)
    assert shown.loc["broad", "value"] == shown.loc["broad", "spread"] and np.isnan(shown.loc["mixed", "value"])


@pytest.mark.parametrize("mask", ["causal", "full", "window", "padded", "blocked"])
def test_the_keys_each_query_sees_and_their_mean_distance(mask) -> None:
    """key_spans, by the diagonals' running sums (a trace's compact causal, full and sliding-window masks) or rows
    read in blocks (padding, a blocked pair), equals counting every (query, key) pair."""
    n, k = 300, 300
    i, keys = np.arange(n)[:, None], np.arange(k)[None, :]
    allowed = {"causal": keys <= i, "full": np.ones((n, k), bool), "window": (keys <= i) & (keys > i - 5),
               "padded": np.broadcast_to(keys < 250, (n, k)), "blocked": (keys <= i) & ~((i == 40) & (keys == 3))}[mask]
    kept = compact(allowed)
    constant = mask in ("causal", "full", "window")
    assert head_roles.constant_diagonals(kept) == head_roles.constant_diagonals(np.array(allowed)) == constant
    seen, mean = head_roles.key_spans(kept)
    np.testing.assert_array_equal(seen, allowed.sum(1))
    np.testing.assert_allclose(mean, (allowed * np.abs(i - keys)).sum(1) / allowed.sum(1), rtol=1e-12)


def test_a_trace_loaded_from_its_file_names_its_heads_as_the_run_did(runners, tmp_path) -> None:
    """A file keeps no summary: the loaded trace's roles come from one made from its kept sources, the same table as
    the one the run's own summary gave (a tiny llama on a text that repeats itself)."""
    runner = runners["llama"]
    trace = runner.run("the cat sat on the mat and the cat sat on the hat, " * 4, options=SUMMARISED)
    trace.save(tmp_path / "run.npz")
    loaded = Trace.load(tmp_path / "run.npz")
    assert trace.summaries and not loaded.summaries
    made, later = trace.head_roles(), loaded.head_roles()
    assert made.role.tolist() == later.role.tolist()
    measures = list(head_roles.MEASURES)
    np.testing.assert_allclose(later[measures].to_numpy(float), made[measures].to_numpy(float), atol=1e-9)
    assert made["induction"].notna().all()  # the run's ids measured it
