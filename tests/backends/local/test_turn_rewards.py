"""Per-turn rewards: ``compute_score`` returns a list, the pipeline keeps it, and the local trainer
credits each assistant turn with what the sample earned from it on (``trainer.turn_advantage``)."""

from __future__ import annotations

import asyncio
import json
import math

import pytest
import torch

from rlfcore import hookimpl
from rlfcore.backends.local import grpo
from rlfcore.config import RewardConfig
from rlfcore.data import normalize_row
from rlfcore.engines.scripted import ScriptedEngine
from rlfcore.loop import Trajectory
from rlfcore.rewards import RewardPipeline, turn_returns
from rlfcore.testing import make_runtime, rollout
from rlfcore.tools import tool
from tests.support.samples import TINY_SIZES


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def call(a: int, b: int) -> str:
    return f'<tool_call>{{"name": "add", "arguments": {{"a": {a}, "b": {b}}}}}</tool_call>'


class PerTurn:
    """0.5 for a turn that calls add(1, 2), 1 for a last turn that answers 3: a reward per turn."""

    @hookimpl
    def register_tools(self, ctx):
        return [add]

    @hookimpl
    def compute_score(self, sample):
        assistant = [m for m in sample.messages if m["role"] == "assistant"]
        rewards = []
        for turn in assistant[len(assistant) - sample.num_turns :]:
            if turn.get("tool_calls"):
                args = turn["tool_calls"][0]["function"]["arguments"]
                rewards.append(0.5 if args == {"a": 1, "b": 2} else 0.0)
            else:
                rewards.append(1.0 if turn["content"] == "3" else 0.0)
        return rewards


class Malformed:
    @hookimpl
    def register_tools(self, ctx):
        return [add]

    @hookimpl
    def compute_score(self, sample):
        return [1.0] if sample.response == "short" else [1.0, "lots"]


class Scalar:
    @hookimpl
    def register_tools(self, ctx):
        return [add]

    @hookimpl
    def compute_score(self, sample):
        return 0.25


SCRIPTS = {
    "right": [call(1, 2), "3"],
    "wrong_answer": [call(1, 2), "4"],
    "wrong_call": [call(2, 2), "3"],
    "neither": [call(2, 2), "4"],
}
TOTALS = {"right": 1.5, "wrong_answer": 0.5, "wrong_call": 1.0, "neither": 0.0}


def group_script(request_id: str, prompt: str) -> str:
    """Sample k of a group plays the k-th script: the call first, the answer once the result is in."""
    script = list(SCRIPTS.values())[int(request_id.rsplit("#", 1)[1]) % len(SCRIPTS)]
    return script[1] if "<tool_response>" in prompt else script[0]


# --- the pipeline --------------------------------------------------------------------------------------


def test_a_list_is_kept_per_turn_and_its_sum_is_the_score():
    rows = [{"id": name, "prompt": "What is 1 + 2?"} for name in SCRIPTS]
    trajectories = rollout({"plugins": ["turns"]}, rows, SCRIPTS, {"turns": PerTurn()})
    by_row = {t.row_id: t for t in trajectories}
    assert all(t.num_turns == 2 and t.tool_calls == 1 and t.reward_error is None for t in trajectories)
    right = by_row["right"]
    assert right.turn_rewards == [0.5, 1.0]
    assert right.reward_components == {"score": 1.5} and right.reward == 1.5
    assert {name: t.reward for name, t in by_row.items()} == TOTALS
    assert by_row["wrong_call"].turn_rewards == [0.0, 1.0]
    record = json.loads(json.dumps(right.record()))  # the samples and `rlf eval` line
    assert record["turn_rewards"] == [0.5, 1.0] and record["reward"] == 1.5
    # each maximal run of generated tokens is one assistant turn, as the trainer assumes
    assert all(len(grpo.turn_spans(t.response_mask)) == t.num_turns for t in trajectories)


def test_a_list_of_the_wrong_length_or_with_a_non_number_is_an_error_on_its_sample():
    rows = [{"id": "short", "prompt": "?"}, {"id": "odd", "prompt": "?"}]
    script = {"short": [call(1, 2), "short"], "odd": [call(1, 2), "3"]}
    short, odd = rollout({"plugins": ["m"]}, rows, script, {"m": Malformed()})
    assert short.reward == 0.0 and short.turn_rewards is None
    assert short.reward_error == "compute_score returned 1 turn rewards for a sample with 2 assistant turns"
    assert odd.reward == 0.0 and odd.turn_rewards is None
    assert "turn reward that is not a number" in odd.reward_error and "lots" in odd.reward_error


def test_rescoring_with_a_scalar_reward_drops_the_old_turn_rewards():
    rows = [{"id": "right", "prompt": "?"}]
    (traj,) = rollout({"plugins": ["turns"]}, rows, SCRIPTS, {"turns": PerTurn()})
    assert traj.turn_rewards == [0.5, 1.0]
    runtime = make_runtime({"plugins": ["turns"]}, {"turns": Scalar()})
    traj.reward_components = {}
    asyncio.run(RewardPipeline(runtime).score([traj]))
    assert traj.reward == 0.25 and traj.turn_rewards is None


def test_turn_returns_credit_each_turn_with_what_follows():
    plain = RewardConfig()
    t = Trajectory(id="a#0", row_id="a", env=None, messages=[], num_turns=3, turn_rewards=[0.5, 0.0, 1.0], reward=1.5)
    assert turn_returns(t, plain) == [1.5, 1.0, 1.0]
    # composed with a judge: the score's turns are weighted, the rest counts on the last turn
    weighted = RewardConfig(weights={"score": 0.5, "judge": 0.5})
    t.reward = 0.5 * 1.5 + 0.5 * 0.8
    assert turn_returns(t, weighted) == pytest.approx([1.15, 0.9, 0.9])
    assert turn_returns(t, RewardConfig(weights={"judge": 1.0})) == [t.reward] * 3  # the turns do not count
    t.reward_error, t.reward = "judge failed", 0.0
    assert turn_returns(t, plain) == [0.0, 0.0, 0.0]
    t.reward_error, t.turn_rewards, t.reward = None, None, 0.7
    assert turn_returns(t, plain) == [0.7, 0.7, 0.7]


# --- the arithmetic ------------------------------------------------------------------------------------


def test_return_to_go_advantages_normalise_with_the_groups_totals():
    returns = [[1.5, 1.0], [0.5, 0.0], [1.0, 1.0], [0.0, 0.0], [2.0, 2.0, 1.0]]
    groups = ["g", "g", "g", "g", "solo"]
    adv = grpo.return_to_go_advantages(returns, groups)
    totals = [1.5, 0.5, 1.0, 0.0]
    mean, std = sum(totals) / 4, math.sqrt(sum((x - 0.75) ** 2 for x in totals) / 3)
    for got, want in zip(adv[:4], returns[:4]):
        assert got == pytest.approx([(g - mean) / (std + 1e-6) for g in want])
    # turn 0 is the outcome advantage
    assert [a[0] for a in adv[:4]] == pytest.approx(grpo.group_advantages(totals, groups[:4]))
    # a group whose totals are alike is not divided by eps: its later turns keep their scale
    assert adv[4] == pytest.approx([0.0, 0.0, -1.0])
    dr = grpo.return_to_go_advantages(returns, groups, std_normalize=False)
    assert dr[1] == pytest.approx([-0.25, -0.75])
    with pytest.raises(ValueError, match=r"samples \[1\] have no assistant turn"):
        grpo.return_to_go_advantages([[1.0], []], ["g", "g"])


def test_token_advantages_follow_the_turns_of_the_mask():
    mask = [1, 1, 0, 0, 1, 0, 1, 1]
    assert grpo.turn_spans(mask) == [(0, 2), (4, 5), (6, 8)]
    assert grpo.token_advantages([0.5, -1.0, 2.0], mask) == [0.5, 0.5, 0.0, 0.0, -1.0, 0.0, 2.0, 2.0]
    with pytest.raises(ValueError, match="2 turn advantages for a response mask with 3 assistant turns"):
        grpo.token_advantages([0.5, -1.0], mask)


def test_per_token_advantages_line_up_with_the_loss_mask():
    prompts, responses, masks = [[1, 2, 3], [1, 2]], [[4, 5, 6, 7], [8, 9, 10]], [[1, 0, 0, 1], [1, 1, 0]]
    batch = grpo.collate(prompts, responses, masks, pad_id=0)
    values = [grpo.token_advantages([2.0, -1.0], masks[0]), grpo.token_advantages([3.0], masks[1])]
    adv = grpo.response_tensor(prompts, values, batch.loss_mask)
    assert adv.shape == batch.loss_mask.shape
    assert adv.tolist() == [[0, 0, 2, 0, 0, -1], [0, 3, 3, 0, 0, 0]]
    assert ((adv != 0).float() == batch.loss_mask).all()  # exactly the generated positions

    torch.manual_seed(0)
    logp, old = torch.randn(2, 6) * 0.1, torch.randn(2, 6) * 0.1
    per_token, _ = grpo.policy_loss(logp, old, adv, batch.loss_mask, 0.2, 0.2)
    ratio = torch.exp(logp - old)
    want = torch.maximum(-adv * ratio, -adv * ratio.clamp(0.8, 1.2))
    assert torch.allclose(per_token, want)
    # one advantage per sequence is the same as that advantage on every token
    seq, _ = grpo.policy_loss(logp, old, torch.tensor([1.5, -0.5]), batch.loss_mask, 0.2, 0.2)
    tok, _ = grpo.policy_loss(logp, old, torch.tensor([[1.5] * 6, [-0.5] * 6]), batch.loss_mask, 0.2, 0.2)
    assert torch.allclose(seq, tok)


# --- the local trainer ---------------------------------------------------------------------------------


def test_local_trainer_trains_with_return_to_go_and_writes_metrics(tmp_path):
    """Two GRPO steps of a tiny model on scripted two-turn samples: every turn gets its own advantage."""
    from rlfcore.backends.local.local import LocalTrainer
    from rlfcore.backends.local.model import ensure_model, load_policy, tool_schemas
    from rlfcore.backends.local.rundir import RunDir

    rows = [{"id": f"r{i}", "prompt": f"What is 1 + {i}?"} for i in range(2)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = {
        "plugins": ["turns"],
        "seed": 1,
        "model": {
            "path": "model",
            "init": {"texts": ["rows.jsonl"], **TINY_SIZES},
        },
        "rollout": {"n": 4, "max_turns": 3, "sampling": {"max_tokens": 200}},
        "trainer": {
            "steps": 2,
            "prompts_per_step": 2,
            "micro_batch_size": 3,
            "turn_advantage": "return_to_go",
            "samples_per_step": 4,
            "lr": 0.01,
            "checkpoint_every": 10,
        },
        "engine": {"device": "cpu"},
    }
    runtime = make_runtime(config, {"turns": PerTurn()})
    model, hf_tok = load_policy(ensure_model(runtime.config, tmp_path, tool_schemas(runtime)), "cpu")
    run_dir = RunDir(tmp_path / "run")
    trainer = LocalTrainer(runtime, model, hf_tok, [normalize_row(r, i) for i, r in enumerate(rows)], run_dir)
    trainer.rollout.engine = ScriptedEngine(trainer.tok, group_script)  # two turns per sample, known rewards

    # one step's samples, as the trainer collects them: per-turn advantages, normalised with the totals
    collected, _, _ = asyncio.run(trainer.collect(trainer.rows))
    mean = 0.75
    std = math.sqrt(sum((x - mean) ** 2 for x in TOTALS.values()) / 3) + 1e-6
    returns = [[1.5, 1.0], [0.5, 0.0], [1.0, 1.0], [0.0, 0.0]]
    assert trainer._advantages(collected) == [pytest.approx([(g - mean) / std for g in r]) for r in returns * 2]

    history = trainer.run()
    run_dir.close()
    assert [m["step"] for m in history] == [1, 2]
    metrics = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2]
    for m in metrics:
        assert m["reward_mean"] == pytest.approx(sum(TOTALS.values()) / 4) and m["reward_errors"] == 0
        assert math.isfinite(m["loss"]) and m["grad_norm"] > 0 and m["active_fraction"] == 1.0
    samples = [json.loads(x) for x in (tmp_path / "run" / "samples" / "step_000001.jsonl").read_text().splitlines()]
    assert [s["turn_rewards"] for s in samples] == [[0.5, 1.0], [0.5, 0.0], [0.0, 1.0], [0.0, 0.0]]
