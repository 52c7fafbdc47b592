"""Errors counted by cause, so a run that failed as a whole says so instead of reporting zeros.

A per-sample failure (an engine error, a scorer's bug) costs only that sample, and is kept in its
record. When every sample of an eval or a training step failed, the command stops and names the
first cause: an endpoint that is down must not look like a model that scores 0.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rlfcore.loop import Trajectory

_HTTP = re.compile(r"\bHTTP (\d{3})\b")
_WIDTH = 60
"""The most characters of an error shown as its failure's kind."""
_EXCEPTION = re.compile(r"\b([A-Z][A-Za-z0-9]*(?:Error|Exception|Timeout))\b")


class RunFailed(RuntimeError):
    """Every sample of an eval or a training step failed: the run measured nothing."""


def error_of(traj: Trajectory) -> str | None:
    """What went wrong with one trajectory: its rollout's error, an agent program's that failed before
    the policy generated anything (a wrong model name, a missing library), else its reward's; None if
    nothing. An agent that failed later is its sample's outcome: what it generated trains."""
    if traj.stop_reason == "error":
        return f"rollout: {traj.error}"
    if traj.stop_reason in ("agent_error", "agent_timeout") and not traj.num_turns:
        return f"agent: {traj.error}"
    if traj.reward_error:
        return f"reward: {traj.reward_error}"
    return None


def cause_of(error: str) -> str:
    """A short name for an error, shared by the samples that failed alike: ``HTTP 404``,
    ``ConnectError``, ``timeout``, else the error's first 60 characters."""
    stage = error.split(":", 1)[0] if error.startswith(("rollout:", "agent:", "reward:")) else ""
    status = _HTTP.search(error)
    names = [n for n in _EXCEPTION.findall(error) if n != "EngineError"]
    if status:
        what = f"HTTP {status.group(1)}"
    elif names:
        what = names[-1]  # the innermost: "EngineError: ... last: ConnectError: ..." is a ConnectError
    elif "timed out" in error:
        what = "timeout"
    else:
        what = error[len(stage) + 2 :] if stage else error
        what = what if len(what) <= _WIDTH else what[: _WIDTH - 3] + "..."
    return f"{stage} {what}" if stage else what


def error_causes(trajectories: Iterable[Trajectory]) -> Counter[str]:
    """How many trajectories failed of each cause."""
    return Counter(cause_of(e) for e in (error_of(t) for t in trajectories) if e is not None)


def error_summary(trajectories: list[Trajectory]) -> str | None:
    """One line: how many failed, by cause, and the first error in full; None when none failed."""
    causes = error_causes(trajectories)
    if not causes:
        return None
    first = next(e for e in (error_of(t) for t in trajectories) if e is not None)
    counts = ", ".join(f"{cause} ×{n}" for cause, n in causes.most_common())
    return f"{sum(causes.values())} of {len(trajectories)} trajectories failed: {counts}; first: {first}"


def check_not_all_failed(trajectories: list[Trajectory], what: str) -> None:
    """Raise :class:`RunFailed` when every trajectory failed (``what``: "eval", "step 3")."""
    if trajectories and all(error_of(t) is not None for t in trajectories):
        raise RunFailed(f"{what}: every trajectory failed, nothing was measured. {error_summary(trajectories)}")
