"""verl's custom reward function, answered by the rlf reward pipeline.

verl calls ``compute_score`` once per sample with the sample's ``extra_info``, into which its reward
managers merge the agent loop's ``extra_fields``; the rlf trace arrives there as ``extra_info["rlf"]``
and is scored by ``verify_tool`` → ``compute_score`` → ``judge`` with the run's plugins, exactly as
the local trainer scores it. verl scores samples one at a time, so ``judge`` sees groups of one; a
judge model verl serves is reached through its reward router.

verl's own rollout dumps keep decoded text and the score only, so each scored sample is also written
as rlf's record (the trace, the reward and its components, the stop reason) to the run's samples
folder, in the local trainer's file layout.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlfcore.loop import Trajectory

log = logging.getLogger("rlfcore.verl")

REWARD_KEYS = ("score", "rlf_error")
"""The keys of every result: verl stacks them across samples, so each sample reports all of them."""


async def compute_score(
    data_source: Any = None,
    solution_str: str | None = None,  # noqa: ARG001 - verl passes these by name; the rlf trace in extra_info has both
    ground_truth: Any = None,  # noqa: ARG001
    extra_info: dict[str, Any] | None = None,
    rlf_config: str | None = None,
    rlf_overrides: list[str] | None = None,
    reward_router_address: str | None = None,
    rlf_samples_dir: str | None = None,
    **_: Any,
) -> dict[str, float]:
    """The rlf reward of one verl sample: ``score`` (the reward) and ``rlf_error`` (1 when scoring failed).

    When verl serves a judge model (``reward.reward_model.enable=true``) it passes the address of its
    reward router; judge plugins then find it in ``ScoreContext.judge_endpoints``. With
    ``rlf_samples_dir`` the scored sample's record is appended there (:func:`write_record`).
    """
    from rlfcore.backends.verl.bridge import trajectory_of
    from rlfcore.backends.verl.shared import shared_runtime
    from rlfcore.rewards import RewardPipeline

    trace = (extra_info or {}).get("rlf")
    if not isinstance(trace, dict):
        raise ValueError(
            f"sample of {data_source!r} has no rlf trace in extra_info['rlf']: it was not produced by the "
            "rlf_agent agent loop (set agent_name=rlf_agent, or convert the data with `rlf train --backend verl`)"
        )
    if not rlf_config:
        raise ValueError("the rlf reward function needs reward.custom_reward_function.reward_kwargs.rlf_config")
    runtime = await shared_runtime(rlf_config, [str(o) for o in (rlf_overrides or [])])
    if reward_router_address:
        runtime.judge_endpoints = [router_url(reward_router_address)]
    traj = trajectory_of(trace)
    await RewardPipeline(runtime).score_group([traj])
    if rlf_samples_dir:
        write_record(Path(rlf_samples_dir), record(trace, traj, (extra_info or {}).get("max_global_steps")))
    return {"score": float(traj.reward), "rlf_error": float(traj.reward_error is not None)}


def record(trace: dict[str, Any], traj: Trajectory, weight_version: Any) -> dict[str, Any]:
    """rlf's record of a scored verl sample: the trace with its reward, ``reward_components``,
    ``reward_error`` and ``turn_rewards``, and ``weight_version``, the trainer step whose weights
    generated its last turn (verl's ``max_global_steps``; None when the server reports none)."""
    return {
        **trace,
        "reward": traj.reward,
        "reward_components": dict(traj.reward_components),
        "reward_error": traj.reward_error,
        "turn_rewards": traj.turn_rewards,
        "weight_version": None if weight_version is None else int(weight_version),
    }


def record_path(samples_dir: Path, weight_version: int | None) -> Path:
    """``step_N.jsonl`` as the local trainer names it: verl's on-policy trainers sample step N with
    the weights of step N - 1; samples without a version go to ``step_unknown.jsonl``."""
    name = "step_unknown" if weight_version is None else f"step_{weight_version + 1:06d}"
    return samples_dir / f"{name}.jsonl"


def write_record(samples_dir: Path, rec: dict[str, Any]) -> None:
    """Append ``rec`` as one JSON line, in one ``write`` on an ``O_APPEND`` file, so reward workers
    in other processes appending to the same step's file never interleave. A failed write is logged
    and the sample keeps its reward: a record must never cost a training step."""
    line = (json.dumps(rec, ensure_ascii=False, default=str) + "\n").encode()
    path = record_path(samples_dir, rec.get("weight_version"))
    try:
        samples_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
    except OSError as exc:
        log.warning("rlf: cannot write the record of sample %s to %s: %s", rec.get("id"), path, exc)


def router_url(address: str) -> str:
    """The OpenAI-compatible base URL of verl's reward router at ``HOST:PORT`` (it forwards every path
    to the judge's vLLM or SGLang servers)."""
    return address if address.startswith(("http://", "https://")) else f"http://{address}/v1"
