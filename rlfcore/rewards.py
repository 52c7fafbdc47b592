"""The reward pipeline: verify_tool → compute_score → judge → one scalar per trajectory.

Groups (the samples of one prompt) are scored concurrently. A scorer's error or timeout is recorded on
its sample (reward 0 and the error) and never stops the others. ``compute_score`` may also reward each
assistant turn (a list); :func:`turn_returns` turns those into what each turn earned from it on.
"""

from __future__ import annotations

import asyncio
import numbers
import traceback
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rlfcore.context import ScoreContext
from rlfcore.hookcall import call_all
from rlfcore.types import Sample, Score, Verification

if TYPE_CHECKING:
    from rlfcore.loop import Trajectory
    from rlfcore.runtime import Runtime
    from rlfcore.schema import RewardConfig


def to_sample(traj: Trajectory) -> Sample:
    return Sample(
        id=traj.id,
        env=traj.env,
        messages=traj.messages,
        response=traj.response,
        ground_truth=traj.ground_truth,
        extra=traj.extra,
        num_turns=traj.num_turns,
        tool_calls=traj.tool_calls,
        tool_errors=traj.tool_errors,
        stop_reason=traj.stop_reason,
    )


def turn_returns(traj: Trajectory, cfg: RewardConfig) -> list[float]:
    """What a scored trajectory earned from each of its assistant turns on; the first is ``traj.reward``.

    With turn rewards ``r``: ``G_k = w * (r_k + ... + r_last) + rest``, ``w`` the weight of ``score``
    in the reward (1 without ``reward.weights``) and ``rest = reward - w * sum(r)`` the part of a
    composed reward that no turn earned alone (judges, other components), counted on the last turn.
    Without turn rewards, or when an error zeroed the reward, every turn gets ``traj.reward``.
    """
    if traj.turn_rewards is None or traj.reward_error is not None:
        return [traj.reward] * traj.num_turns
    w = cfg.weights.get("score", 0.0) if cfg.weights else 1.0
    rest = traj.reward - w * sum(traj.turn_rewards)
    return [w * sum(traj.turn_rewards[k:]) + rest for k in range(len(traj.turn_rewards))]


class HookResultError(TypeError):
    """A reward hook returned a value of a type its spec does not allow."""


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


_SHOWN_CHARS = 80
"""The most characters of a wrong value's repr that an error message shows."""


def _shown(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + '...'}"


def check_result(hook: str, plugin: str, value: Any) -> None:
    """Raise :class:`HookResultError` naming plugin, hook and value when ``value`` breaks ``hook``'s spec."""
    if hook == "verify_tool":
        ok, expected = isinstance(value, Verification), "a Verification or None"
    elif hook == "compute_score":
        ok = isinstance(value, (Score, list, tuple)) or _is_number(value)  # a list's entries: _take_turns
        expected = "a float, a Score, a list of per-turn floats, or None"
    else:
        ok = isinstance(value, (list, tuple)) and all(v is None or isinstance(v, Score) or _is_number(v) for v in value)
        expected = "a list with one float, Score or None per sample of the group, or None"
    if not ok:
        raise HookResultError(f"{hook} of plugin '{plugin}' returned {_shown(value)}; expected {expected}")


def _checker(hook: str) -> Callable[[str, Any], None]:
    """:func:`check_result` for ``hook``, as ``hookcall``'s per-answer check."""
    return lambda plugin, value: check_result(hook, plugin, value)


class _Failure(str):
    """What ``_guard`` returns for a failed hook: the reason, with the traceback when one was raised."""

    traceback: str | None = None


class RewardPipeline:
    """Scores finished trajectories in place: ``reward``, ``reward_components``, ``reward_error`` and
    ``turn_rewards``."""

    def __init__(self, runtime: Runtime):
        self.runtime = runtime
        self.cfg = runtime.config.reward

    async def score(self, trajectories: list[Trajectory]) -> None:
        groups: OrderedDict[str, list[Trajectory]] = OrderedDict()
        for t in trajectories:
            groups.setdefault(t.row_id, []).append(t)
        await asyncio.gather(*(self.score_group(g) for g in groups.values()))

    async def score_group(self, group: list[Trajectory]) -> None:
        env = group[0].env
        samples = [to_sample(t) for t in group]
        ctx = ScoreContext(
            env=env,
            settings=self.runtime.settings(env),
            config=self.runtime.config,
            group=samples,
            runtime=self.runtime,
            judge_endpoints=list(self.runtime.judge_endpoints),
        )
        await asyncio.gather(*(self._score_one(t, s, ctx) for t, s in zip(group, samples)))
        judged = await self._guard(
            call_all(
                self.runtime.plugins,
                "judge",
                self.runtime.plugins.impls("judge"),
                check=_checker("judge"),
                samples=samples,
                ctx=ctx,
            ),
            "judge",
        )
        if isinstance(judged, _Failure):
            for t in group:
                t.reward_error = t.reward_error or str(judged)
                t.reward_traceback = t.reward_traceback or judged.traceback
        else:
            for plugin, scores in judged:
                for t, value in zip(group, list(scores) + [None] * (len(group) - len(scores))):
                    if value is not None:
                        v = value.value if isinstance(value, Score) else float(value)
                        t.reward_components[f"judge.{plugin}"] = v
                        if isinstance(value, Score) and value.error:
                            t.reward_error = t.reward_error or value.error
        for t in group:
            self._compose(t)

    async def _score_one(self, traj: Trajectory, sample: Sample, ctx: ScoreContext) -> None:
        traj.turn_rewards = None  # a rescored trajectory must not keep the old reward's turns
        traj.reward_traceback = None
        if traj.agent_reward is not None:
            traj.reward_components["agent"] = traj.agent_reward
        if traj.stop_reason == "error":
            traj.reward_error = f"rollout failed: {traj.error}"
            return
        verification = await self._guard(
            self.runtime.call_first("verify_tool", traj.env, check=_checker("verify_tool"), sample=sample, ctx=ctx),
            "verify_tool",
        )
        if isinstance(verification, _Failure):
            traj.reward_error, traj.reward_traceback = str(verification), verification.traceback
            return
        if isinstance(verification, Verification):
            traj.reward_components["verified"] = float(verification.passed)
        score = await self._guard(
            self.runtime.call_first(
                "compute_score",
                traj.env,
                check=_checker("compute_score"),
                sample=sample,
                verification=verification,
                ctx=ctx,
            ),
            "compute_score",
        )
        if isinstance(score, _Failure):
            traj.reward_error, traj.reward_traceback = str(score), score.traceback
        elif isinstance(score, Score):
            traj.reward_components.update({k: float(v) for k, v in score.components.items()})
            traj.reward_components["score"] = float(score.value)
            traj.reward_error = score.error
        elif isinstance(score, (list, tuple)):
            self._take_turns(traj, score)
        elif score is not None:
            traj.reward_components["score"] = float(score)

    @staticmethod
    def _take_turns(traj: Trajectory, rewards: list[Any] | tuple[Any, ...]) -> None:
        """Per-turn rewards: kept when there is one number per assistant turn; their sum is ``score``."""
        if len(rewards) != traj.num_turns:
            traj.reward_error = (
                f"compute_score returned {len(rewards)} turn rewards for a sample with {traj.num_turns} assistant turns"
            )
            return
        try:
            values = [float(r) for r in rewards]
        except (TypeError, ValueError) as exc:
            traj.reward_error = f"compute_score returned a turn reward that is not a number: {exc}"
            return
        traj.turn_rewards = values
        traj.reward_components["score"] = sum(values)

    async def _guard(self, awaitable: Any, what: str) -> Any:
        """The awaited value, or a :class:`_Failure` naming the failure (exception or timeout)."""
        try:
            return await asyncio.wait_for(awaitable, self.cfg.timeout_s)
        except asyncio.TimeoutError:
            return _Failure(f"{what} timed out after {self.cfg.timeout_s:g} s")
        except HookResultError as exc:  # the message names plugin, hook and value; no traceback to read
            return _Failure(str(exc))
        except Exception as exc:  # a scorer's bug costs its sample's reward, not the step
            failure = _Failure(f"{what} failed: {type(exc).__name__}: {exc}")
            failure.traceback = traceback.format_exc()
            return failure

    def _compose(self, traj: Trajectory) -> None:
        comps = traj.reward_components
        judges = [v for k, v in comps.items() if k.startswith("judge.")]
        if judges:
            comps["judge"] = sum(judges) / len(judges)
        if traj.reward_error is not None:
            traj.reward = 0.0
        elif self.cfg.weights:
            traj.reward = sum(w * comps.get(k, 0.0) for k, w in self.cfg.weights.items())
        else:
            traj.reward = comps.get("score", comps.get("judge", comps.get("agent", 0.0)))
