"""Answer normalisation, exact match and F1 (SQuAD / NQ style, HotpotQA's yes/no rule), and the reward."""

from __future__ import annotations

import json

import pytest
from rlf_deepsearch.answers import exact_match, extract_answer, f1_score, gold_answers, normalize_answer
from rlf_deepsearch.rewards import score_sample
from rlf_deepsearch.settings import Settings

from rlfcore import Sample


@pytest.mark.parametrize(
    "text, expected",
    [
        ("The Eiffel Tower!", "eiffel tower"),
        ("  an   Apple, a day ", "apple day"),
        ("Theatre", "theatre"),  # "the" inside a word stays
        ("U.S.A.", "usa"),
    ],
)
def test_normalize_answer(text, expected):
    assert normalize_answer(text) == expected


@pytest.mark.parametrize(
    "prediction, golds, em, f1",
    [
        ("Chief of Protocol", ["Chief of Protocol"], 1.0, 1.0),
        ("the chief of protocol.", ["Chief of Protocol"], 1.0, 1.0),
        ("Chief", ["Chief of Protocol"], 0.0, 0.5),  # precision 1, recall 1/3
        ("December 1972", ["14 December 1972 UTC", "December 1972"], 1.0, 1.0),  # any gold counts
        ("14 December", ["14 December 1972 UTC", "December 1972"], 0.0, 2 * 1.0 * 0.5 / 1.5),
        ("Paris", ["London"], 0.0, 0.0),
        ("Yes.", ["yes"], 1.0, 1.0),
        ("no", ["yes"], 0.0, 0.0),
        ("yes they did", ["yes"], 0.0, 0.0),  # HotpotQA: no partial credit against yes/no
        ("no", ["no one"], 0.0, 0.0),
        ("", ["Paris"], 0.0, 0.0),
    ],
)
def test_exact_match_and_f1(prediction, golds, em, f1):
    assert exact_match(prediction, golds) == em
    assert f1_score(prediction, golds) == pytest.approx(f1)


@pytest.mark.parametrize(
    "ground_truth, expected",
    [
        ("Mars", ["Mars"]),
        (["a", "b"], ["a", "b"]),
        ({"target": ["x", "y"]}, ["x", "y"]),  # Search-R1's reward_model.ground_truth
        ({"answers": "z"}, ["z"]),
        (None, []),
        (1972, ["1972"]),
    ],
)
def test_gold_answers_layouts(ground_truth, expected):
    assert gold_answers(ground_truth) == expected


def test_gold_answers_names_a_bad_mapping():
    with pytest.raises(ValueError, match="target, answers, answer"):
        gold_answers({"gold": "x"})


def test_extract_answer():
    assert extract_answer("<think>hmm</think><answer>a</answer> then <answer> b </answer>", True) == "b"
    assert extract_answer("<think>hmm</think> Paris", False) == "Paris"
    assert extract_answer("<think>hmm</think> Paris", True) is None


def _sample(response: str, gold, **kw) -> Sample:
    messages = kw.pop("messages", [{"role": "user", "content": "q"}, {"role": "assistant", "content": response}])
    return Sample(
        id="s",
        env="deepsearch",
        messages=messages,
        response=response,
        ground_truth=gold,
        stop_reason=kw.pop("stop_reason", "answer"),
        **kw,
    )


def test_reward_em_f1_and_format_weight():
    gold = ["Chief of Protocol"]
    right = score_sample(_sample("<answer>chief of protocol</answer>", gold), Settings())
    assert right.value == 1.0 and right.components == {"exact_match": 1.0, "f1": 1.0}
    partial = score_sample(_sample("<answer>Chief</answer>", gold), Settings(reward="f1"))
    assert partial.value == pytest.approx(0.5) and partial.components["exact_match"] == 0.0
    weighted = score_sample(_sample("<answer>Venus</answer>", gold), Settings(format_reward=0.2))
    assert weighted.value == pytest.approx(0.2) and weighted.components["format"] == 1.0
    sloppy = score_sample(_sample("Venus, I think", gold), Settings(format_reward=0.2))
    assert sloppy.value == 0.0 and sloppy.components["format"] == 0.0
    assert score_sample(_sample("x", None), Settings()) is None


def test_search_r1_reward_needs_answer_tags_and_the_tag_format():
    settings = Settings(format="search-r1", format_reward=0.5)
    turn = (
        "<think>look it up</think>\n<search>corliss archer</search>\n\n<information>Doc 1(Title: x) y</information>\n\n"
        "<think>found</think>\n<answer>Chief of Protocol</answer>"
    )
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": turn}]
    good = score_sample(_sample(turn, ["Chief of Protocol"], messages=messages), settings)
    assert good.value == 1.0 and good.components["format"] == 1.0
    untagged = score_sample(_sample("Chief of Protocol", ["Chief of Protocol"]), settings)
    assert untagged.components == {"exact_match": 0.0, "f1": 0.0, "format": 0.0}
    for broken in (
        "chatter " + turn,
        turn.replace("<think>found</think>\n", ""),
    ):  # text outside tags; no think before the answer
        messages[1]["content"] = broken
        assert (
            score_sample(_sample(broken, ["Chief of Protocol"], messages=messages), settings).components["format"]
            == 0.0
        )


@pytest.mark.parametrize(
    "turn, gold, value",
    [
        (
            "<think>a</think><search>q</search><information>Paris is big</information><think>b</think><answer>Paris</answer>",
            "Paris",
            1.0,
        ),
        (
            "<search>q</search><information>Paris</information><think>b</think><answer>Paris</answer>",
            "Paris",
            0.8,
        ),  # right, badly formed
        (
            "<think>a</think><search>q</search><information>Paris is big</information><think>b</think><answer>Rome</answer>",
            "Paris",
            0.3,
        ),
        (
            "<think>a</think><search>q</search><information>Lyon</information><think>b</think><answer>Rome</answer>",
            "Paris",
            0.2,
        ),
        ("<think>a</think><answer>Rome</answer> trailing", "Paris", 0.1),  # wrong and badly formed
        ("<think>a</think><search>q</search>", "Paris", 0.0),  # no answer, unfinished
    ],
)
def test_search_r1_reward_follows_qa_em_format(turn, gold, value):
    """Search-R1's compute_score_em with structure 0.2, final 0.1, retrieval 0.1 (its comments' numbers)."""
    settings = Settings(format="search-r1", reward="search-r1")
    score = score_sample(_sample(turn, [gold], messages=[{"role": "assistant", "content": turn}]), settings)
    assert score.value == pytest.approx(value)


def test_yes_no_answers_of_hotpotqa(shared_data):
    rows = [json.loads(line) for line in (shared_data / "qa/hotpotqa/questions.jsonl").read_text().splitlines()]
    closed = [r for r in rows if normalize_answer(r["answers"][0]) in ("yes", "no")]
    assert len(closed) == 39  # as the data's README states
    for r in closed:
        gold = r["answers"]
        flipped = "no" if normalize_answer(gold[0]) == "yes" else "yes"
        assert exact_match(gold[0].upper() + ".", gold) == 1.0
        assert exact_match(flipped, gold) == 0.0 and f1_score(flipped, gold) == 0.0
        assert f1_score(f"{gold[0]} indeed", gold) == 0.0
