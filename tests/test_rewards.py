"""The reward pipeline: verification feeds the score, judges see whole groups, failures cost one sample."""

from __future__ import annotations

import asyncio

from rlfcore import Score, Verification, hookimpl
from rlfcore.testing import rollout


class Verified:
    @hookimpl
    def verify_tool(self, sample):
        if sample.response == "crash":
            raise ValueError("verifier bug")
        return Verification(passed=sample.response == "42")

    @hookimpl
    async def compute_score(self, sample, verification):
        if sample.response == "slow":
            await asyncio.sleep(5)
        return Score(value=1.0 if verification.passed else 0.0, components={"format": 0.5})


class GroupJudge:
    seen: list[int] = []

    @hookimpl
    def judge(self, samples, ctx):
        GroupJudge.seen.append(len(samples))
        return [1.0 if s.response == "42" else 0.5 for s in samples]


def test_verification_score_and_failures_per_sample():
    rows = [{"id": x, "prompt": "?"} for x in ("good", "bad", "crash", "slow")]
    script = {"good": ["42"], "bad": ["41"], "crash": ["crash"], "slow": ["slow"]}
    good, bad, crash, slow = rollout({"plugins": ["v"], "reward": {"timeout_s": 0.3}}, rows, script, {"v": Verified()})
    assert good.reward == 1.0 and good.reward_components == {"verified": 1.0, "format": 0.5, "score": 1.0}
    assert bad.reward == 0.0 and bad.reward_error is None
    assert crash.reward == 0.0 and "verify_tool failed: ValueError: verifier bug" in crash.reward_error
    assert slow.reward == 0.0 and "compute_score timed out" in slow.reward_error


def test_judge_gets_the_whole_group_and_weights_compose():
    GroupJudge.seen.clear()
    config = {
        "plugins": ["v", "j"],
        "envs": {"main": ["v"]},
        "rollout": {"n": 3},
        "reward": {"weights": {"score": 0.5, "judge": 0.5}},
    }
    script = lambda request_id, prompt: "42" if request_id.endswith("#0") else "no"  # noqa: E731
    trajectories = rollout(
        config, [{"id": "a", "prompt": "?"}, {"id": "b", "prompt": "?"}], script, {"v": Verified(), "j": GroupJudge()}
    )
    assert GroupJudge.seen == [3, 3]
    first, second, _ = trajectories[:3]
    assert first.reward_components["judge.j"] == 1.0 and first.reward == 0.5 * 1.0 + 0.5 * 1.0
    assert second.reward == 0.5 * 0.0 + 0.5 * 0.5


def test_default_exact_match_and_answer_tags():
    rows = [
        {"id": "a", "prompt": "?", "ground_truth": "Paris"},
        {"id": "b", "prompt": "?", "ground_truth": ["x", "Rome"]},
    ]
    a, b = rollout({}, rows, {"a": ["<think>hmm</think>The answer: <answer> paris </answer>"], "b": ["rome"]})
    assert a.reward == 1.0 and b.reward == 1.0 and a.env is None
