"""``rlf eval``: rollouts and rewards over a dataset, one JSON line per trajectory, and a summary.

Each group (the samples of one row) is scored and written as soon as it finishes, so an interrupted
run keeps everything it finished. With several samples per row (``rlf eval --repeats k``) the
summary also gives pass@k and mean@k, and :func:`row_profiles` each row's difficulty: the file
``data.difficulty`` reads to pick training rows.
"""

from __future__ import annotations

import asyncio
import math
import statistics
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from rlfcore.agents.rollout import AgentRollout, agent_rollout
from rlfcore.chat import ChatTokenizer
from rlfcore.chatloop import ChatRollout
from rlfcore.data import Row
from rlfcore.diagnostics import trajectory_warnings
from rlfcore.engines.base import Engine
from rlfcore.engines.chat import ChatEngine
from rlfcore.failures import error_causes
from rlfcore.loop import Rollout, Trajectory, TurnLoop
from rlfcore.rewards import RewardPipeline
from rlfcore.runtime import Runtime
from rlfcore.surrogates import json_line


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k of one row with ``c`` of ``n`` samples solved: 1 - C(n-c, k) / C(n, k), the
    chance that k of its samples drawn without replacement hold a solved one (Chen et al., 2021)."""
    if not 0 < k <= n:
        raise ValueError(f"pass@{k} needs 1 <= k <= n samples, got n={n}")
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def k_values(n: int) -> list[int]:
    """The k that pass@k is reported for with ``n`` samples a row: 1, the powers of 2 below n, and n."""
    ks = [1]
    while ks[-1] * 2 < n:
        ks.append(ks[-1] * 2)
    return ks + [n] if n > 1 else ks


def row_profiles(trajectories: list[Trajectory], solved_at: float) -> list[dict[str, Any]]:
    """One line per row, in the rows' order: its samples, how many scored ``>= solved_at``, its solve
    rate, and its reward's mean and (population) variance. A failed sample counts, unsolved."""
    by_row: dict[str, list[float]] = {}
    for t in trajectories:
        by_row.setdefault(t.row_id, []).append(t.reward)
    return [
        {
            "id": row_id,
            "samples": len(rewards),
            "solved": sum(1 for r in rewards if r >= solved_at),
            "solve_rate": sum(1 for r in rewards if r >= solved_at) / len(rewards),
            "reward_mean": statistics.fmean(rewards),
            "reward_var": statistics.pvariance(rewards),
        }
        for row_id, rewards in by_row.items()
    ]


def profile_summary(profiles: list[dict[str, Any]], solved_at: float) -> dict[str, Any]:
    """pass@k for each of :func:`k_values` (rows averaged alike, whatever their sample count) and
    mean@k, the rows' mean reward over their samples; k is the fewest samples any row has."""
    n = min((p["samples"] for p in profiles), default=0)
    if not n:
        return {"samples_per_row": 0, "solved_at": solved_at, "pass_at_k": {}, "mean_at_k": 0.0}
    return {
        "samples_per_row": n,
        "solved_at": solved_at,
        "pass_at_k": {
            k: statistics.fmean(pass_at_k(p["samples"], p["solved"], k) for p in profiles) for k in k_values(n)
        },
        "mean_at_k": statistics.fmean(p["reward_mean"] for p in profiles),
    }


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
    solved_at: float = 1.0,
) -> tuple[list[Trajectory], dict[str, Any]]:
    """Roll out and score every row (``rollout.n`` samples each), writing JSON lines to ``out``; a
    sample whose reward is at least ``solved_at`` solved its row (pass@k, :func:`profile_summary`).

    A chat engine runs the message loop (:mod:`rlfcore.chatloop`, no tokenizer); any other engine the
    token loop, which needs ``tokenizer``; a config with an ``agent`` runs that agent on the endpoint."""
    rollout: TurnLoop[Any] | AgentRollout
    if isinstance(engine, ChatEngine):
        rollout = ChatRollout(runtime, engine)
    elif tokenizer is None:
        raise ValueError("a token engine needs the model's tokenizer (model.path or model.tokenizer)")
    else:
        rollout = agent_rollout(runtime, engine, tokenizer) or Rollout(runtime, engine, tokenizer)
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
    summary.update(profile_summary(row_profiles(trajectories, solved_at), solved_at))
    summary["warnings"] = [m for _, m in trajectory_warnings(trajectories, runtime.config, groups=False)]
    return trajectories, summary


def write_profiles(path: Path, profiles: list[dict[str, Any]], solved_at: float) -> None:
    """The difficulty file: one JSON line per row, each with the threshold its solve rate used."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for p in profiles:
            f.write(json_line({**p, "solved_at": solved_at}))


def difficulty_out(out: Path) -> Path:
    """``runs/eval-x.jsonl`` -> ``runs/eval-x.difficulty.jsonl``: the difficulty file beside the trajectories."""
    return out.with_name(f"{out.stem if out.suffix == '.jsonl' else out.name}.difficulty.jsonl")


def default_out(config_path: str | Path) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"eval-{Path(config_path).stem}-{stamp}.jsonl"
