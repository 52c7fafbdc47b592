"""Run folders for the ``rlf ui`` tests, made as ``rlf train`` and ``rlf eval`` leave them.

They hold real trajectories: the real loop, executor and reward pipeline, with a real BPE tokenizer
(built here from text, as ``rlf init-model`` does) and its chat template. Only the policy is a stand-in,
:class:`ScriptedEngine` playing fixed texts, with made-up logprobs so the heat map has something to show.
Files are written line by line in the format ``RunDir`` writes (``Trajectory.record()``), without
importing torch.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

from rlfcore.chat import HFChatTokenizer
from rlfcore.data import normalize_row
from rlfcore.engines.base import Generation, SamplingParams
from rlfcore.engines.scripted import ScriptedEngine
from rlfcore.loop import Rollout
from rlfcore.rewards import RewardPipeline
from rlfcore.testing import make_runtime

TOKEN = "ui-test-token-0123456789"  # the secret every request needs; a real start makes a fresh one
BASE = "http://127.0.0.1:8765"  # a Host the UI accepts (loopback)

PLUGIN = '''
"""Test tools for the UI: an adder, a tool that outlives its timeout, and a scorer that fails on one row."""
import asyncio
from rlfcore.hookspecs import hookimpl
from rlfcore.types import Tool


async def _slow(seconds: float = 5.0) -> str:
    await asyncio.sleep(seconds)
    return "done"


def _add(a: int, b: int) -> str:
    return str(a + b)


@hookimpl
def register_tools(ctx):
    return [
        Tool("add", "Add two integers.", {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
             "required": ["a", "b"]}, _add),
        Tool("slow", "Wait, then answer (times out).", {"type": "object", "properties": {"seconds": {"type": "number"}}}, _slow,
             timeout_s=0.2),
    ]


@hookimpl
def compute_score(sample, verification, ctx):
    if sample.ground_truth == "boom":
        raise RuntimeError("scorer failed on purpose")
    return 1.0 if sample.response.strip() == str(sample.ground_truth) else 0.0
'''

CALL_ADD = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
CALL_SLOW = '<tool_call>\n{"name": "slow", "arguments": {"seconds": 5}}\n</tool_call>'

ROWS = {
    "good": [
        {"id": "q1", "prompt": "What is 2+3?", "ground_truth": "5"},
        {"id": "q2", "prompt": "What is 4+4?", "ground_truth": "8"},
    ],
    "mismatch": [{"id": "ws", "prompt": "What is 2+3, with spaces?", "ground_truth": "5"}],
    "timeouts": [{"id": "slow", "prompt": "Wait for it.", "ground_truth": "done"}],
    "badreward": [{"id": "boom", "prompt": "Score me.", "ground_truth": "boom"}],
    "sure": [{"id": "sure", "prompt": "What is 2+3, surely?", "ground_truth": "5"}],
}
DEAD_PID = 4_194_305  # above Linux's largest pid_max: no process has it


def policy(request_id: str, prompt: str) -> str:
    """Even samples call the tool and answer right, odd ones guess: groups with reward variance."""
    row, k = request_id.split("#")
    called = "<tool_response>" in prompt
    if row == "ws":
        return "  5  " if called else CALL_ADD  # content is stripped: the rollout departs from a rendering
    if row == "slow":
        return "done" if called else CALL_SLOW
    if row == "boom":
        return "whatever"
    if row == "sure":  # a row the policy has learnt: every sample right
        return "5" if called else CALL_ADD
    if int(k) % 2:
        return "7"
    return ("5" if row == "q1" else "8") if called else CALL_ADD


class LogprobEngine(ScriptedEngine):
    """The scripted policy, with varied logprobs standing in for a model's (the heat map needs some)."""

    async def generate(self, prompt_ids: list[int], params: SamplingParams, request_id: str = "") -> Generation:
        gen = await super().generate(prompt_ids, params, request_id)
        return Generation(gen.token_ids, [-(i % 7) * 0.8 for i in range(len(gen.token_ids))], gen.finish_reason)


def build_tokenizer(folder: Path) -> HFChatTokenizer:
    from rlfcore.tinymodel import build_tokenizer as build

    texts = ["What is 2+3? What is 4+4? Wait for it. Score me. done whatever answer tool call add slow"] * 20
    return HFChatTokenizer(build(texts, folder, vocab_size=300))


def write_config(folder: Path, plugin: Path) -> Path:
    cfg = folder / "run.yaml"
    cfg.write_text(
        textwrap.dedent(f"""\
        local_plugins: [{plugin}]
        model: {{path: {folder / "model"}}}
        data: {{train: {folder / "rows.jsonl"}}}
        rollout: {{n: 4, max_turns: 3}}
        trainer: {{steps: 3}}
        """)
    )
    (folder / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for rows in ROWS.values() for r in rows))
    return cfg


def roll(config: Path, tok: HFChatTokenizer, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Real rollouts of ``rows`` (4 samples each), scored: their JSON records."""
    runtime = make_runtime(config)

    async def go() -> list[Any]:
        loop = Rollout(runtime, LogprobEngine(tok, policy), tok)
        async with runtime:
            trajs = await loop.run([normalize_row(dict(r), i) for i, r in enumerate(rows)])
            await RewardPipeline(runtime).score(trajs)
        return trajs

    return [t.record() for t in asyncio.run(go())]


def metrics_line(step: int, records: list[dict[str, Any]]) -> dict[str, Any]:
    """The step metrics LocalTrainer logs, computed from the records the same way."""
    n, calls = len(records), sum(r["tool_calls"] for r in records)
    rewards = [r["reward"] for r in records]
    out = {
        "step": step,
        "reward_mean": statistics.fmean(rewards),
        "reward_std": statistics.pstdev(rewards),
        "tool_calls_per_trajectory": calls / n,
        "tool_use": sum(1 for r in records if r["tool_calls"]) / n,
        "tool_error_rate": sum(r["tool_errors"] for r in records) / calls if calls else 0.0,
        "response_length": statistics.fmean(r["generated_tokens"] for r in records),
        "reward_errors": sum(1 for r in records if r["reward_error"]),
        "kl": 0.01 * step,
        "loss": 0.1 / step,
        "rollout_s": 0.5,
        "score_s": 0.01,
        "train_s": 0.2,
        "step_s": 0.71,
    }
    comps: dict[str, list[float]] = {}
    for r in records:
        for k, v in r["reward_components"].items():
            comps.setdefault(k, []).append(v)
    out.update({f"reward/{k}": statistics.fmean(v) for k, v in comps.items()})
    out.update({f"stop/{k}": v for k, v in Counter(r["stop_reason"] for r in records).items()})
    return out


def write_run(
    folder: Path,
    steps: list[list[dict[str, Any]]],
    tokenizer_dir: Path,
    finished: bool = True,
    checkpoint: bool = True,
) -> Path:
    """A run folder as ``rlf train`` leaves it: config, metrics and samples per step, a checkpoint, a summary."""
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text("plugins: []\ntrainer:\n  steps: 3\nrollout:\n  n: 4\n")
    if checkpoint:
        model = folder / "checkpoints" / "step_000001" / "model"
        model.mkdir(parents=True)
        for f in tokenizer_dir.iterdir():
            (model / f.name).write_bytes(f.read_bytes())
        (model.parent / "trainer.pt").write_bytes(b"state")
    (folder / "samples").mkdir()
    for step, records in enumerate(steps, 1):
        append_step(folder, step, records)
    if finished:
        (folder / "summary.json").write_text(json.dumps({"steps": len(steps), "total_s": 42.0}))
    return folder


def append_step(folder: Path, step: int, records: list[dict[str, Any]]) -> None:
    with (folder / "samples" / f"step_{step:06d}.jsonl").open("w") as f:
        f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    with (folder / "metrics.jsonl").open("a") as f:
        f.write(json.dumps(metrics_line(step, records)) + "\n")


def write_launch(folder: Path, kind: str, config: Path, rc: int | None, pid: int = DEAD_PID, **more: Any) -> None:
    """``ui_launch.json`` as the launch page writes it (``rc`` None: the process has not ended, or its
    end was never recorded because the UI that launched it stopped first)."""
    out = ["--out", str(folder / "eval.jsonl")] if kind == "eval" else ["--run-dir", str(folder)]
    record = {
        "kind": kind,
        "config": str(config),
        "overrides": [],
        "resume": False,
        "command": ["python", "-m", "rlfcore", kind, str(config), *out],
        "pid": pid,
        "started": 1000.0,
        "rc": rc,
        **({"ended": 1042.0} if rc is not None else {}),
        **more,
    }
    (folder / "ui_launch.json").write_text(json.dumps(record))


def write_eval(folder: Path, records: list[dict[str, Any]], config: Path, rc: int | None, pid: int = DEAD_PID) -> Path:
    """An eval launched from the UI: its launch record, its log and ``eval.jsonl``; no metrics at all."""
    folder.mkdir(parents=True)
    with (folder / "eval.jsonl").open("w") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)
    (folder / "ui.log").write_text(f"$ -m rlfcore eval {config}\neval 2/2 rows  reward 0.500\n")
    write_launch(folder, "eval", config, rc, pid)
    return folder


def write_trained(folder: Path, step_records: list[dict[str, Any]], saved: list[dict[str, Any]], config: Path) -> Path:
    """A healthy run launched from the UI and finished: 3 GRPO steps whose metrics cover all their samples
    (``step_records``), of which each step saved only ``saved`` (``trainer.samples_per_step: 4`` of a group
    of ``rollout.n: 8``, all right); KL and drift near 1e-7; 200 SFT steps, token accuracy every 50."""
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text("plugins: []\ntrainer:\n  steps: 3\n  samples_per_step: 4\nrollout:\n  n: 8\n")
    with (folder / "sft_metrics.jsonl").open("w") as f:
        for step in range(1, 201):
            row: dict[str, Any] = {"step": step, "loss": 3.0 / step**0.5}
            if step % 50 == 0:
                row["token_accuracy"] = 0.5 + step / 500
            f.write(json.dumps(row) + "\n")
    (folder / "samples").mkdir()
    for step in range(1, 4):
        with (folder / "samples" / f"step_{step:06d}.jsonl").open("w") as f:
            f.writelines(json.dumps(r) + "\n" for r in saved)
        line = {
            **metrics_line(step, step_records),
            "kl": step * 1.1e-7,
            "logprob_drift": step * 4e-8,
            "active_fraction": 0.5,
        }
        with (folder / "metrics.jsonl").open("a") as f:
            f.write(json.dumps(line) + "\n")
    (folder / "summary.json").write_text(json.dumps({"status": "finished", "steps": 3, "total_s": 42.0}))
    write_launch(folder, "train", config, 0)
    return folder


def make_ui_world(base: Path) -> dict[str, Any]:
    """Under ``base``: a runs folder with a finished run, a live one, and runs with a token mismatch, tool
    timeouts and a failed reward, among others; returned with the config and the good rows' records."""
    plugin = base / "ui_test_tools.py"
    plugin.write_text(PLUGIN)
    tok = build_tokenizer(base / "model")
    config = write_config(base, plugin)
    good = roll(config, tok, ROWS["good"])
    sure = roll(config, tok, ROWS["sure"])
    runs = base / "runs"
    made = {
        "finished": write_run(runs / "finished", [good, good, good], base / "model"),
        "live": write_run(runs / "live", [good], base / "model", finished=False),
        "mismatch": write_run(runs / "mismatch", [roll(config, tok, ROWS["mismatch"])], base / "model"),
        "timeouts": write_run(runs / "timeouts", [roll(config, tok, ROWS["timeouts"] + ROWS["good"])], base / "model"),
        "badreward": write_run(
            runs / "badreward", [roll(config, tok, ROWS["badreward"] + ROWS["good"])], base / "model"
        ),
        "trained": write_trained(runs / "trained", good + sure, sure, config),
        "evaluated": write_eval(runs / "evaluated", good, config, rc=0),
        "stopped": write_run(runs / "stopped", [good], base / "model", finished=False, checkpoint=False),
        "orphaned": write_run(runs / "orphaned", [good], base / "model", finished=False),
    }
    (runs / "stopped" / "summary.json").write_text(json.dumps({"status": "stopped", "steps": 1}))
    write_launch(runs / "stopped", "train", config, 143, stopped=True)
    write_launch(runs / "orphaned", "train", config, None)  # its UI ended first: the exit code never came
    return {"base": base, "runs": runs, "config": config, "made": made, "good": good}
