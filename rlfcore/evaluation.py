"""``rlf eval``: rollouts and rewards over a dataset, one JSON line per trajectory, and a summary.

Each group (the samples of one row) is scored and written as soon as it finishes, so an interrupted
run keeps everything it finished.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from rlfcore.agents.rollout import AgentRollout, agent_rollout
from rlfcore.chat import ChatTokenizer
from rlfcore.chatloop import chat_rollout
from rlfcore.data import Row
from rlfcore.diagnostics import trajectory_warnings
from rlfcore.engines.base import Engine
from rlfcore.engines.chat import ChatEngine
from rlfcore.failures import error_causes
from rlfcore.loop import Rollout, Trajectory, TurnLoop
from rlfcore.rewards import RewardPipeline
from rlfcore.runtime import Runtime
from rlfcore.surrogates import json_line


def summarize(trajectories: list[Trajectory], seconds: float) -> dict[str, Any]:
    """Aggregate figures of a set of scored trajectories."""
    rewards = [t.reward for t in trajectories]
    calls = sum(t.tool_calls for t in trajectories)
    components: dict[str, list[float]] = {}
    for t in trajectories:
        for k, v in t.reward_components.items():
            components.setdefault(k, []).append(v)
    n = len(trajectories) or 1
    return {
        "trajectories": len(trajectories),
        "reward_mean": statistics.fmean(rewards) if rewards else 0.0,
        "reward_std": statistics.pstdev(rewards) if len(rewards) > 1 else 0.0,
        "components": {k: statistics.fmean(v) for k, v in sorted(components.items())},
        "stop_reasons": dict(Counter(t.stop_reason for t in trajectories)),
        "tool_calls_per_trajectory": calls / n,
        "tool_error_rate": sum(t.tool_errors for t in trajectories) / calls if calls else 0.0,
        "turns_per_trajectory": sum(t.num_turns for t in trajectories) / n,
        "response_tokens_mean": sum(len(t.response_ids) for t in trajectories) / n,
        "reward_errors": sum(1 for t in trajectories if t.reward_error),
        "template_mismatches": sum(1 for t in trajectories if t.template_mismatch),
        "errors": dict(error_causes(trajectories).most_common()),
        "seconds": seconds,
    }


async def evaluate(
    runtime: Runtime,
    engine: Engine | ChatEngine,
    tokenizer: ChatTokenizer | None,
    rows: list[Row],
    out: IO[str] | None = None,
    on_group: Callable[[list[Trajectory]], None] | None = None,
) -> tuple[list[Trajectory], dict[str, Any]]:
    """Roll out and score every row (``rollout.n`` samples each), writing JSON lines to ``out``.

    A chat engine runs the message loop (:mod:`rlfcore.chatloop`, no tokenizer); any other engine the
    token loop, which needs ``tokenizer``; a config with an ``agent`` runs that agent on the endpoint."""
    rollout: TurnLoop[Any] | AgentRollout | None = chat_rollout(runtime, engine)
    if rollout is None:
        if tokenizer is None:
            raise ValueError("a token engine needs the model's tokenizer (model.path or model.tokenizer)")
        rollout = agent_rollout(runtime, engine, tokenizer) or Rollout(runtime, engine, tokenizer)  # type: ignore[arg-type]
    rewards = RewardPipeline(runtime)
    start = time.perf_counter()

    async def one(row: Row) -> list[Trajectory]:
        group = await rollout.group(row)
        await rewards.score_group(group)
        if out is not None:
            for t in group:
                out.write(json_line(t.record()))
            out.flush()
        if on_group is not None:
            on_group(group)
        return group

    groups = await asyncio.gather(*(one(row) for row in rows))
    trajectories = [t for g in groups for t in g]
    summary = summarize(trajectories, time.perf_counter() - start)
    summary["warnings"] = [m for _, m in trajectory_warnings(trajectories, runtime.config, groups=False)]
    return trajectories, summary


def default_out(config_path: str | Path) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"eval-{Path(config_path).stem}-{stamp}.jsonl"
