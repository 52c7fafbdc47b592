"""Warnings that pay for themselves: a run that cannot learn, or measures little, says why and what to change.

Each check looks at a step's (or an eval's) trajectories, or at the config, and returns plain
sentences; :class:`Advisor` prints each kind once per run, so a log is not flooded by one cause.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rlfcore.loop import Trajectory
    from rlfcore.schema import RunConfig

TOOL_ERROR_RATE = 0.5
"""Above this share of failed tool calls, a step or eval warns: the model is mostly learning from errors."""


def config_warnings(config: RunConfig, training: bool) -> list[tuple[str, str]]:
    """``(kind, message)`` for settings that make a run do less than it seems to."""
    out = []
    if config.sft.data and not config.sft.steps and training:
        out.append(
            (
                "sft_steps",
                f"sft.data is set ({config.sft.data}) but sft.steps is 0, so SFT is skipped: "
                "set sft.steps (for example sft.steps=200), or remove sft.data",
            )
        )
    return out


def trajectory_warnings(trajectories: list[Trajectory], config: RunConfig, groups: bool) -> list[tuple[str, str]]:
    """``(kind, message)`` for what one step's (``groups``: GRPO groups matter) or one eval's samples show."""
    out: list[tuple[str, str]] = []
    if not trajectories:
        return out
    if groups:
        by_row: dict[str, list[float]] = {}
        for t in trajectories:
            by_row.setdefault(t.row_id, []).append(t.reward)
        if all(max(r) == min(r) for r in by_row.values()):
            rewards = {t.reward for t in trajectories}
            if config.rollout.n == 1:
                why = "rollout.n is 1, so each group has one sample: set rollout.n to 4 or more"
            elif len(rewards) == 1:
                why = (
                    f"every trajectory scored {next(iter(rewards)):g}: the reward is constant; check compute_score "
                    "and reward.weights (rlf eval shows each component)"
                )
            else:
                why = (
                    "the samples of each prompt scored alike: raise rollout.n or rollout.sampling.temperature, "
                    "or give partial credit in the reward"
                )
            out.append(
                (
                    "zero_variance",
                    "zero reward variance in every group: all advantages are 0 and the step "
                    f"learns nothing (active_fraction 0); {why}",
                )
            )
    calls = sum(t.tool_calls for t in trajectories)
    failed = sum(t.tool_errors for t in trajectories)
    if calls and failed / calls > TOOL_ERROR_RATE:
        kinds: Counter[str] = Counter()
        for t in trajectories:
            kinds.update(t.tool_error_kinds)
        top = ", ".join(f"{k} ×{n}" for k, n in kinds.most_common(3))
        out.append(
            (
                "tool_errors",
                f"tool error rate {failed / calls:.2f} ({failed} of {calls} calls failed: {top}): "
                "read the tool messages in the trajectories, and fix the tool or the prompt's "
                "description of its arguments",
            )
        )
    if all(t.truncated for t in trajectories):
        r = config.rollout
        out.append(
            (
                "truncated",
                "every trajectory was truncated (rollout.max_response_tokens "
                f"{r.max_response_tokens}, rollout.max_total_tokens {r.max_total_tokens}, "
                f"rollout.sampling.max_tokens {r.sampling.max_tokens}): raise them, or lower "
                "rollout.max_turns",
            )
        )
    return out


class Advisor:
    """Prints each kind of warning the first time it occurs, with where (``step 3``)."""

    def __init__(self, emit: Callable[[str], None] | None = None):
        self.emit = emit or _stderr
        self.seen: set[str] = set()

    def __call__(self, found: list[tuple[str, str]], where: str = "") -> None:
        for kind, message in found:
            if kind not in self.seen:
                self.seen.add(kind)
                self.emit(f"warning: {where + ': ' if where else ''}{message}")


def _stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
