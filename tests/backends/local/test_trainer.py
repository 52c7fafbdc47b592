"""The local trainer: GRPO arithmetic, a run folder, resume that matches an uninterrupted run, SFT, rescore.

Models are tiny Qwen3 models built here from the tests' own text (no hub).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rlfcore.backends.local import grpo
from tests.support.rlf import run_rlf

PLUGIN = '''
from rlfcore import Score, hookimpl
from rlfcore.tools import tool


@tool
def echo(text: str) -> str:
    """Repeat the text."""
    return text


@hookimpl
def register_tools(ctx):
    return [echo]


@hookimpl
def compute_score(sample):
    # reward answers that start with "A": learnable from a random start in a few steps
    return Score(value=float(sample.response.startswith("A")), components={"starts_with_a": float(sample.response.startswith("A"))})
'''


def test_group_advantages_normalise_within_groups():
    adv = grpo.group_advantages([1.0, 0.0, 1.0, 1.0, 0.5, 0.5], ["a", "a", "a", "b", "b", "b"])
    assert adv[0] == pytest.approx(1 / (3**0.5) * 1.0, rel=1e-3) and adv[1] == pytest.approx(
        -2 / 3 / (1 / 3**0.5), rel=1e-3
    )
    assert adv[3:] == [pytest.approx(1 / 3 / 0.28867, rel=1e-3), pytest.approx(-1 / 6 / 0.28867, rel=1e-3)] + [
        pytest.approx(-1 / 6 / 0.28867, rel=1e-3)
    ]
    dr = grpo.group_advantages([1.0, 0.0], ["g", "g"], std_normalize=False)
    assert dr == [0.5, -0.5]
    assert grpo.group_advantages([1.0, 1.0], ["g", "g"]) == [0.0, 0.0]


def test_policy_loss_clips_only_beyond_the_trust_region():
    old = torch.zeros(1, 3)
    logp = torch.log(torch.tensor([[1.1, 1.5, 0.5]]))
    mask = torch.ones(1, 3)
    loss, frac = grpo.policy_loss(logp, old, torch.tensor([1.0]), mask, 0.2, 0.2)
    assert loss.tolist()[0] == pytest.approx(
        [-1.1, -1.2, -0.5], rel=1e-5
    )  # 1.5 clipped to 1.2 for a positive advantage
    assert frac.item() == pytest.approx(1 / 3)
    loss_neg, _ = grpo.policy_loss(logp, old, torch.tensor([-1.0]), mask, 0.2, 0.2)
    assert loss_neg.tolist()[0] == pytest.approx([1.1, 1.5, 0.8], rel=1e-5)  # 0.5 clipped to 0.8 for a negative one


@pytest.mark.parametrize("how", ["token-mean", "seq-mean"])
def test_micro_batch_accumulation_equals_one_pass(how):
    torch.manual_seed(0)
    per_token = torch.randn(4, 6)
    mask = (torch.rand(4, 6) > 0.3).float()
    total_tokens, total_seqs = mask.sum().item(), 4.0
    whole = grpo.aggregate(per_token, mask, how, total_tokens, total_seqs)
    parts = grpo.aggregate(per_token[:2], mask[:2], how, total_tokens, total_seqs) + grpo.aggregate(
        per_token[2:], mask[2:], how, total_tokens, total_seqs
    )
    assert parts.item() == pytest.approx(whole.item(), rel=1e-6)


def test_pack_keeps_a_long_sequence_from_padding_the_short_ones():
    lengths = [10, 12, 240, 11, 9, 13]
    assert grpo.pack(lengths, range(6), max_seqs=64, max_tokens=None) == [[4, 0, 3, 1, 5, 2]]
    # 5 short ones fit 5 x 13 = 65 <= 100 tokens padded; the long one goes alone
    assert grpo.pack(lengths, range(6), max_seqs=64, max_tokens=100) == [[4, 0, 3, 1, 5], [2]]
    assert grpo.pack(lengths, [0, 1, 3, 4, 5], max_seqs=2, max_tokens=None) == [[4, 0], [3, 1], [5]]
    assert grpo.pack(lengths, [], max_seqs=2, max_tokens=50) == []


def test_collate_marks_exactly_the_generated_positions():
    b = grpo.collate([[1, 2, 3]], [[4, 5, 6, 7]], [[1, 0, 0, 1]], pad_id=0)
    # loss_mask[t] scores the prediction of token t+1: tokens 4 (pos 3) and 7 (pos 6)
    assert b.loss_mask.tolist() == [[0, 0, 1, 0, 0, 1]]
    assert b.input_ids.tolist() == [[1, 2, 3, 4, 5, 6, 7]]


def _project(tmp_path: Path, steps: int, sft_steps: int = 0) -> Path:
    (tmp_path / "plugin.py").write_text(PLUGIN)
    rows = [{"id": f"r{i}", "prompt": f"Say something about {i}."} for i in range(8)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    demos = [
        {
            "messages": [
                {"role": "user", "content": f"Say something about {i}."},
                {"role": "assistant", "content": f"{'AB'[i % 2]} is fine"},
            ]
        }
        for i in range(8)
    ]
    (tmp_path / "demos.jsonl").write_text("".join(json.dumps(d) + "\n" for d in demos))
    config = f"""
local_plugins: [plugin.py]
seed: 3
model:
  path: model
  init: {{texts: [rows.jsonl, demos.jsonl], vocab_size: 300, hidden_size: 32, num_layers: 1, num_heads: 2, num_kv_heads: 1, intermediate_size: 64}}
data: {{train: rows.jsonl}}
sft: {{data: demos.jsonl, steps: {sft_steps}, batch_size: 4}}
rollout: {{n: 4, max_turns: 2, sampling: {{max_tokens: 6, temperature: 1.0}}}}
trainer: {{steps: {steps}, prompts_per_step: 2, lr: 0.01, checkpoint_every: 2, micro_batch_size: 3, samples_per_step: 2}}
engine: {{device: cpu}}
"""
    (tmp_path / "run.yaml").write_text(config)
    return tmp_path / "run.yaml"


def _metrics(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


DETERMINISTIC = ("reward_mean", "loss", "grad_norm", "response_length", "tool_calls_per_trajectory", "lr")


def test_train_writes_the_run_folder_and_resume_matches_an_uninterrupted_run(tmp_path):
    config = _project(tmp_path, steps=4, sft_steps=3)
    full = run_rlf("train", str(config), "--run-dir", str(tmp_path / "full"), cwd=tmp_path)
    assert full.returncode == 0, full.stdout + full.stderr
    run = tmp_path / "full"
    for name in ("config.yaml", "metrics.jsonl", "sft_metrics.jsonl", "summary.json", "reward_curve.png"):
        assert (run / name).exists(), name
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["sft", "step_000002", "step_000004"]
    assert len(list((run / "samples").iterdir())) == 4
    metrics = _metrics(run)
    assert [m["step"] for m in metrics] == [1, 2, 3, 4]
    for key in (
        "reward_mean",
        "reward_std",
        "reward/starts_with_a",
        "tool_calls_per_trajectory",
        "tool_error_rate",
        "response_length",
        "generate_s",
        "tools_s",
        "score_s",
        "train_s",
        "loss",
        "kl",
        "grad_norm",
        "lr",
    ):
        assert key in metrics[0], key
    assert any(k.startswith("stop/") for k in metrics[0])
    assert metrics[0]["logprob_drift"] < 1e-3  # engine and trainer agree on the tokens' logprobs

    # interrupted after 2 steps, then resumed to 4: the same numbers as the uninterrupted run
    part = run_rlf("train", str(config), "trainer.steps=2", "--run-dir", str(tmp_path / "part"), cwd=tmp_path)
    assert part.returncode == 0, part.stderr
    # a resume continues the recorded run (trainer.steps=2): taking it on to 4 is said on the command line
    resumed = run_rlf(
        "train", str(config), "--run-dir", str(tmp_path / "part"), "--resume", "trainer.steps=4", cwd=tmp_path
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    again = _metrics(tmp_path / "part")
    assert [m["step"] for m in again] == [1, 2, 3, 4]
    for a, b in zip(metrics, again):
        for key in DETERMINISTIC:
            assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-7), (a["step"], key)

    refused = run_rlf("train", str(config), "--run-dir", str(run), cwd=tmp_path)
    assert refused.returncode != 0 and "--resume" in refused.stderr


def test_grpo_raises_a_learnable_reward(tmp_path):
    """After SFT on answers starting with A or B alike, GRPO paying for A must shift the policy to A."""
    config = _project(tmp_path, steps=20, sft_steps=40)
    out = run_rlf(
        "train",
        str(config),
        "--run-dir",
        str(tmp_path / "run"),
        "trainer.prompts_per_step=4",
        "rollout.n=8",
        "trainer.checkpoint_every=20",
        "sft.lr=0.01",
        "trainer.lr=0.003",
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["reward_last_10pct"] >= summary["reward_first_10pct"] + 0.3, summary


def test_sft_learns_the_demonstrated_answer_and_rescore_recomputes(tmp_path):
    config = _project(tmp_path, steps=0, sft_steps=60)
    out = run_rlf("sft", str(config), "sft.lr=0.01", "--run-dir", str(tmp_path / "sft"), cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    history = [json.loads(x) for x in (tmp_path / "sft" / "sft_metrics.jsonl").read_text().splitlines()]
    assert history[-1]["loss"] < history[0]["loss"] / 3 and history[-1]["token_accuracy"] > 0.9

    evaluated = tmp_path / "eval.jsonl"
    model = tmp_path / "sft" / "checkpoints" / "sft" / "model"
    out = run_rlf(
        "eval",
        str(config),
        f"model.path={model}",
        "data.eval=rows.jsonl",
        "--limit",
        "2",
        "--out",
        str(evaluated),
        "rollout.sampling.temperature=0",
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    records = [json.loads(x) for x in evaluated.read_text().splitlines()]
    assert all(r["messages"][-1]["content"][:1] in ("A", "B") for r in records)  # learned from the demonstrations
    # a new reward (a local plugin that pays for "B"): rescoring changes the rewards, nothing is generated
    (tmp_path / "pay_b.py").write_text(
        "from rlfcore import hookimpl\n\n@hookimpl\ndef compute_score(sample):\n    return float(sample.response.startswith('B'))\n"
    )
    (tmp_path / "rescore.yaml").write_text("local_plugins: [pay_b.py]\n")
    out = run_rlf(
        "rescore", str(evaluated), str(tmp_path / "rescore.yaml"), "--out", str(tmp_path / "new.jsonl"), cwd=tmp_path
    )
    assert out.returncode == 0, out.stdout + out.stderr
    new = [json.loads(x) for x in (tmp_path / "new.jsonl").read_text().splitlines()]
    starts_b = [float(r["messages"][-1]["content"].startswith("B")) for r in records]
    assert [r["reward"] for r in records] == [1.0 - b for b in starts_b] and [r["reward"] for r in new] == starts_b
    assert [r["response_ids"] for r in new] == [r["response_ids"] for r in records]


def test_sft_follows_its_learning_rate_schedule(tmp_path):
    """``sft.lr_schedule`` and ``sft.warmup_steps``: a linear warmup to ``sft.lr``, then a linear decay."""
    config = _project(tmp_path, steps=0, sft_steps=6)
    out = run_rlf(
        "sft",
        str(config),
        "sft.lr=0.01",
        "sft.lr_schedule=linear",
        "sft.warmup_steps=2",
        "--run-dir",
        str(tmp_path / "sft"),
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    lrs = [json.loads(x)["lr"] for x in (tmp_path / "sft" / "sft_metrics.jsonl").read_text().splitlines()]
    assert lrs == pytest.approx([0.005, 0.01, 0.01, 0.0075, 0.005, 0.0025]), lrs  # each step's own rate


def test_each_epoch_serves_every_row_once_in_a_seeded_order_and_steps_run_across_epochs():
    from rlfcore.backends.local.local import row_order

    steps = [row_order(10, 3, step, 4) for step in range(5)]  # 20 positions: two epochs of 10 rows
    flat = [i for s in steps for i in s]
    assert sorted(flat[:10]) == list(range(10)) and sorted(flat[10:]) == list(range(10))
    assert flat[:10] != flat[10:] and flat[:10] != list(range(10))  # each epoch has its own shuffle
    assert steps == [row_order(10, 3, step, 4) for step in range(5)]  # the same seed, the same order
    assert steps[2] == flat[8:12]  # step 2 straddles the epochs
    assert [row_order(10, 4, step, 4) for step in range(5)] != steps
