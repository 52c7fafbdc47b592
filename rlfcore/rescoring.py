"""``rlf rescore``: new rewards for stored trajectories, for iterating on a reward without generating."""

from __future__ import annotations

import json
import statistics
from dataclasses import fields
from pathlib import Path
from typing import Any

from rlfcore.loop import Trajectory
from rlfcore.plugins import PluginManager
from rlfcore.rewards import RewardPipeline
from rlfcore.runtime import Runtime
from rlfcore.schema import RunConfig
from rlfcore.surrogates import json_line

_FIELDS = {f.name for f in fields(Trajectory)}
_MOVED = 1e-12
"""A reward that moved by less than this is float noise, not a changed reward."""


def read_trajectories(path: Path) -> list[Trajectory]:
    """The JSON lines ``rlf eval`` and training samples write, back into trajectories."""
    out = []
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                out.append(Trajectory(**{k: v for k, v in record.items() if k in _FIELDS}))
            except (json.JSONDecodeError, TypeError) as exc:
                raise ValueError(f"{path}:{n}: not a trajectory record: {exc}") from None
    return out


async def rescore_file(config: RunConfig, manager: PluginManager, src: Path, dst: Path) -> dict[str, Any]:
    trajectories = read_trajectories(src)
    before = [t.reward for t in trajectories]
    for t in trajectories:
        t.reward, t.reward_components, t.reward_error = 0.0, {}, None
    runtime = await Runtime.create(config, manager)
    for t in trajectories:  # a reward iterated on in another config may name its environment differently
        if t.env not in runtime.environments:
            t.env = runtime.env_of({"id": t.row_id})
    async with runtime:
        await RewardPipeline(runtime).score(trajectories)
    with dst.open("w", encoding="utf-8") as f:
        for t in trajectories:
            f.write(json_line(t.record()))
    after = [t.reward for t in trajectories]
    return {
        "trajectories": len(trajectories),
        "reward_before": statistics.fmean(before) if before else 0.0,
        "reward_after": statistics.fmean(after) if after else 0.0,
        "changed": sum(1 for a, b in zip(before, after) if abs(a - b) > _MOVED),
    }
