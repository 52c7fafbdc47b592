"""A run's config and metrics for the tracker tests, importable by the subprocess that reads Trackio back."""

from __future__ import annotations

from rlfcore.trackers import Trackers

CONFIG = {"trainer": {"lr": 0.001, "steps": 2}, "seed": 0}


def log_a_run(trackers: Trackers) -> None:
    """Two SFT and two GRPO steps, with a string and a bool among the numbers (trackers log numbers only)."""
    trackers.log({"loss": 2.5, "step": 1}, 1, "sft/")
    trackers.log({"loss": 1.5, "step": 2}, 2, "sft/")
    trackers.log({"step": 1, "reward_mean": 0.25, "tool_use": 1, "note": "not a number", "done": True}, 1)
    trackers.log({"step": 2, "reward_mean": 0.75, "tool_use": 0}, 2)
