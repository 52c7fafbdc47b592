"""Both formats end to end through rlf's real loop and reward pipeline, on HotpotQA's real data.

A scripted policy searches with the question and answers with the gold answer (reward 1) or a wrong
one (reward 0); the observations are the index's passages, rendered token-exactly.
"""

from __future__ import annotations

import json

import pytest
from rlf_deepsearch.formats import INVALID_ACTION, search_r1_passages
from rlf_deepsearch.index import BM25Index
from rlf_deepsearch.prepare import to_row
from rlf_deepsearch.search import format_passages

from rlfcore.testing import rollout

N = 12
ROOMY = {"max_response_tokens": 16384, "max_total_tokens": 32768}
"""The stand-in tokenizer has one token per byte: room for 3,000-character search results."""


@pytest.fixture
def hotpot(shared_data, tmp_path_factory):
    root = shared_data / "qa/hotpotqa"
    index_dir = tmp_path_factory.getbasetemp() / "deepsearch-index"
    questions = [json.loads(line) for line in (root / "questions.jsonl").read_text().splitlines()]
    settings = {"corpus": str(root / "corpus.jsonl"), "index_dir": str(index_dir)}
    return settings, questions[:: len(questions) // N][:N], BM25Index.open(root / "corpus.jsonl", index_dir)


def _call(query: str) -> str:
    return "<tool_call>\n" + json.dumps({"name": "search", "arguments": {"query": query}}) + "\n</tool_call>"


def test_hermes_search_then_gold_answer_scores_one(hotpot):
    settings, questions, index = hotpot
    rows = [to_row(q, "test", q["id"]) for q in questions]
    script = {q["id"]: [_call(q["question"]), f"<answer>{q['answers'][0]}</answer>"] for q in questions}
    trajectories = rollout({"plugins": ["deepsearch"], "rollout": ROOMY, "deepsearch": settings}, rows, script)
    for q, t in zip(questions, trajectories):
        assert t.error is None and t.stop_reason == "answer" and t.tool_calls == 1 and t.tool_errors == 0
        assert t.reward == 1.0 and t.reward_components["exact_match"] == 1.0
        tool_message = t.messages[2]
        assert tool_message["role"] == "tool"
        assert tool_message["content"] == format_passages(index.search([q["question"]], 3)[0], 3000)
        assert t.template_mismatch is None


def test_hermes_wrong_answer_scores_zero(hotpot):
    settings, questions, _ = hotpot
    rows = [to_row(q, "test", q["id"]) for q in questions[:4]]
    script = {q["id"]: [_call(q["question"]), "<answer>Atlantis</answer>"] for q in questions[:4]}
    trajectories = rollout({"plugins": ["deepsearch"], "rollout": ROOMY, "deepsearch": settings}, rows, script)
    assert [t.reward for t in trajectories] == [0.0] * 4


STOP = {"sampling": {"stop": ["</search>", "</answer>"]}}


def test_search_r1_tags_end_to_end(hotpot):
    settings, questions, index = hotpot
    rows = [to_row(q, "test", q["id"], fmt="search-r1") for q in questions]
    script = {
        q["id"]: [
            f"<think>I need to look this up.</think>\n<search>{q['question']}</search>",
            f"<think>The passages say it.</think>\n<answer>{q['answers'][0]}</answer>",
        ]
        for q in questions
    }
    config = {
        "plugins": ["deepsearch"],
        "rollout": {**ROOMY, **STOP},
        "deepsearch": {**settings, "format": "search-r1", "format_reward": 0.2},
    }
    trajectories = rollout(config, rows, script)
    for q, t in zip(questions, trajectories):
        assert t.error is None and t.stop_reason == "answer" and t.tool_calls == 1
        assert t.reward == 1.0 and t.reward_components["format"] == 1.0
        _user, turn = t.messages  # one assistant turn: the information block is raw text inside it
        passages = search_r1_passages(index.search([q["question"]], 3)[0], 3000)
        assert turn == {
            "role": "assistant",
            "content": f"{script[q['id']][0]}\n\n<information>{passages.strip()}</information>\n\n{script[q['id']][1]}",
        }
        assert t.template_mismatch is None  # not checked: the turn is not a chat-template rendering
        assert t.response_mask.count(0) == len(f"\n\n<information>{passages.strip()}</information>\n\n".encode())
    # no tool list in the prompt: Search-R1 prompts describe the tags themselves
    assert "<tools>" not in json.dumps(trajectories[0].messages) and "search tool" not in rows[0]["prompt"]


def test_search_r1_invalid_action_and_wrong_answer(hotpot):
    settings, questions, _ = hotpot
    q = questions[0]
    config = {
        "plugins": ["deepsearch"],
        "rollout": {**ROOMY, **STOP},
        "deepsearch": {**settings, "format": "search-r1", "format_reward": 0.2},
    }
    script = {q["id"]: ["I am not sure what to do.", "<think>ok</think><answer>Atlantis</answer>"]}
    [t] = rollout(config, [to_row(q, "test", q["id"], fmt="search-r1")], script)
    assert t.messages[1]["content"] == "I am not sure what to do." + INVALID_ACTION + script[q["id"]][1]
    assert t.tool_errors == 1 and t.stop_reason == "answer"
    assert t.reward == 0.0 and t.reward_components == {"exact_match": 0.0, "f1": 0.0, "format": 0.0, "score": 0.0}
    script = {
        q["id"]: [f"<think>a</think><search>{q['question']}</search>", "<think>b</think><answer>Atlantis</answer>"]
    }
    [t] = rollout(config, [to_row(q, "test", q["id"], fmt="search-r1")], script)
    assert t.reward == pytest.approx(0.2)  # well formed, wrong: only the format weight


def test_search_r1_data_runs_unchanged(hotpot):
    """A row as Search-R1's data scripts write it (verl parquet layout) needs no conversion."""
    settings, questions, _ = hotpot
    q = questions[1]
    row = {
        "data_source": "hotpotqa",
        "prompt": [{"role": "user", "content": to_row(q, "t", "x", fmt="search-r1")["prompt"]}],
        "ability": "fact-reasoning",
        "reward_model": {"style": "rule", "ground_truth": {"target": q["answers"]}},
        "extra_info": {"split": "dev", "index": 7},
    }
    script = {"7": [f"<search>{q['question']}</search>", f"<answer>{q['answers'][0]}</answer>"]}
    config = {
        "plugins": ["deepsearch"],
        "envs": {"hotpotqa": ["deepsearch"]},
        "rollout": {**ROOMY, **STOP},
        "deepsearch": {**settings, "format": "search-r1"},
    }
    [t] = rollout(config, [row], script)
    assert t.env == "hotpotqa" and t.reward == 1.0 and "</search>\n\n<information>Doc 1" in t.messages[1]["content"]
