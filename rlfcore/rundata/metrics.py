"""A run's metrics, one row per step in rlf's names, whichever backend wrote them, and the summary
a finished run gets.

The local trainer writes ``RUN/metrics.jsonl`` in rlf's names. Under ``rlf train --backend verl``,
verl's own ``file`` logger writes ``RUN/verl_metrics.jsonl``, one ``{"step": N, "data": {...}}`` line
per step in verl's names (``critic/score/mean``, ``timing_s/gen``, ...); a ``--resume`` sets the steps
it keeps aside in ``verl_metrics.earlier.jsonl`` first, because the logger starts its file anew. Both
are read in place, byte offsets and all, each verl line renamed here: the keys rlf charts get rlf's
names, every other key keeps its verl name.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from rlfcore.rundata.files import read_jsonl_from, read_jsonl_tail

LOCAL_FILE = "metrics.jsonl"
"""The local trainer's metrics, one row per step in rlf's names."""

VERL_FILE = "verl_metrics.jsonl"
"""Where verl's own ``file`` logger writes each step's metrics in the run folder."""

VERL_EARLIER_FILE = "verl_metrics.earlier.jsonl"
"""The metrics of the steps before a ``--resume``, set aside because verl's file logger starts its file anew."""

NAMES: dict[str, tuple[str, ...]] = {
    "reward_mean": ("critic/score/mean",),
    "response_length": ("response_length/mean",),
    "tool_calls_per_trajectory": ("tool_call_counts/mean",),
    "loss": ("actor/pg_loss", "actor/loss"),
    "grad_norm": ("actor/grad_norm",),
    "kl": ("actor/kl_loss", "actor/ppo_kl"),
    "clip_frac": ("actor/pg_clipfrac",),
    "rollout_s": ("timing_s/gen",),
    "score_s": ("timing_s/reward",),
    "train_s": ("timing_s/update_actor",),
    "step_s": ("timing_s/step",),
}
"""rlf's name, and the verl keys that fill it, the first present winning (the others keep their verl
names): ``kl`` is the KL to the reference (``actor/kl_loss``, logged when ``trainer.kl_coef > 0``), else
the old-vs-new policy KL (``actor/ppo_kl``); ``loss`` is the policy loss, else the total."""


def from_verl(line: dict[str, Any]) -> dict[str, Any]:
    """One FileLogger line as an rlf metrics row: ``step`` plus ``data``'s keys, renamed where rlf has a name."""
    data = line.get("data")
    data = dict(data) if isinstance(data, dict) else {}
    row: dict[str, Any] = {"step": line.get("step")}
    for name, sources in NAMES.items():
        key = next((k for k in sources if k in data), None)
        if key is not None:
            row[name] = data.pop(key)
    row.update((k, v) for k, v in data.items() if k not in row)
    return row


def has_metrics(path: Path) -> bool:
    """The run folder holds a metrics file, rlf's or verl's."""
    return (path / LOCAL_FILE).exists() or verl_only(path)


def verl_only(path: Path) -> bool:
    """A verl run: its metrics are verl's file logger's, in verl's names."""
    return not (path / LOCAL_FILE).exists() and any((path / f).exists() for f in (VERL_FILE, VERL_EARLIER_FILE))


def read_metrics_from(path: Path, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
    """The run's metrics rows from byte ``offset`` on, in rlf's names: ``metrics.jsonl``'s, or for a
    verl run its two files translated, read as one: the steps kept from before a ``--resume``, then
    the current ones (an offset past the first file's size is into the second)."""
    if not verl_only(path):
        return read_jsonl_from(path / LOCAL_FILE, offset)
    earlier = path / VERL_EARLIER_FILE
    size = earlier.stat().st_size if earlier.exists() else 0
    rows: list[dict[str, Any]] = []
    if offset < size:
        rows, offset = read_jsonl_from(earlier, offset)
    if offset >= size:
        current, end = read_jsonl_from(path / VERL_FILE, offset - size)
        rows, offset = rows + current, size + end
    return [from_verl(r) for r in rows], offset


def read_metrics_tail(path: Path, n: int) -> list[dict[str, Any]]:
    """The run's last ``n`` metrics rows, in rlf's names (see :func:`read_metrics_from`)."""
    if not verl_only(path):
        return read_jsonl_tail(path / LOCAL_FILE, n)
    rows = read_jsonl_tail(path / VERL_FILE, n)
    if len(rows) < n:
        rows = read_jsonl_tail(path / VERL_EARLIER_FILE, n - len(rows)) + rows
    return [from_verl(r) for r in rows]


def summarize(metrics: list[dict[str, Any]], **times: float) -> dict[str, Any]:
    """Reward and tool use over the first and last 10% of steps, and where the time went."""
    if not metrics:
        return {"steps": 0, **times}
    k = max(1, len(metrics) // 10)

    def mean(key: str, part: list[dict[str, Any]]) -> float:
        return statistics.fmean(m.get(key, 0.0) for m in part)

    first, last = metrics[:k], metrics[-k:]
    return {
        "steps": len(metrics),
        "reward_first_10pct": mean("reward_mean", first),
        "reward_last_10pct": mean("reward_mean", last),
        "reward_gain": mean("reward_mean", last) - mean("reward_mean", first),
        "tool_use_first_10pct": mean("tool_use", first),
        "tool_use_last_10pct": mean("tool_use", last),
        "steps_without_signal": sum(1 for m in metrics if m.get("active_fraction", 1.0) == 0.0),
        **times,
    }
