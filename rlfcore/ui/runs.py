"""Reading run folders for the UI: which runs exist, their status, metrics, warnings and log tail.

Everything here only reads, and reads defensively: trainers of other versions (or verl) write other
fields, a live run's last line may be half written, and a folder may hold anything.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlfcore.rundata.files import read_json
from rlfcore.rundata.metrics import LOCAL_FILE, VERL_EARLIER_FILE, VERL_FILE, has_metrics, read_metrics_tail

LIVE_WINDOW_S = 120.0
"""A run whose files changed this recently counts as running."""

LAUNCH_FILE = "ui_launch.json"
"""Written by the launch page only: the command, its pid and, once it ended, its exit code."""

MARKERS = (
    LOCAL_FILE,
    VERL_FILE,
    VERL_EARLIER_FILE,
    "sft_metrics.jsonl",
    "config.yaml",
    "samples",
    "eval.jsonl",
    LAUNCH_FILE,
)
"""A folder holding one of these is a run folder."""


@dataclass
class RunInfo:
    """One row of the runs list."""

    name: str
    path: Path
    status: str
    steps: int = 0
    total_steps: int | None = None
    reward: float | None = None
    tool_use: float | None = None
    updated: float = 0.0
    elapsed_s: float | None = None
    backend: str = "local"
    kind: str = "train"
    extra: dict[str, Any] = field(default_factory=dict)


def find_runs(root: Path) -> list[RunInfo]:
    """The run folders under ``root`` (``root`` itself included, two levels down), newest first."""
    found: list[Path] = []
    if _is_run(root):
        found.append(root)
    for child in sorted(root.iterdir()) if root.is_dir() else []:
        if child.is_dir() and not child.name.startswith("."):
            if _is_run(child):
                found.append(child)
            else:
                found.extend(g for g in sorted(child.iterdir()) if g.is_dir() and _is_run(g))
    runs = [run_info(root, p) for p in found]
    return sorted(runs, key=lambda r: r.updated, reverse=True)


def _is_run(path: Path) -> bool:
    return any((path / m).exists() for m in MARKERS)


def run_name(root: Path, path: Path) -> str:
    return "." if path == root else path.relative_to(root).as_posix()


def resolve_run(root: Path, name: str) -> Path:
    """The folder of run ``name``, refusing names that leave ``root``."""
    path = (root / name).resolve() if name != "." else root.resolve()
    if not path.is_relative_to(root.resolve()) or not path.is_dir() or not _is_run(path):
        raise LookupError(f"no run named {name!r} under {root}")
    return path


def run_info(root: Path, path: Path) -> RunInfo:
    metrics = read_metrics_tail(path, 1)
    last = metrics[-1] if metrics else {}
    config = read_config(path)
    steps_total = _get(config, "trainer", "steps")
    info = RunInfo(
        name=run_name(root, path),
        path=path,
        status=status(path),
        steps=int(last.get("step", 0)) if isinstance(last.get("step", 0), (int, float)) else 0,
        total_steps=steps_total if isinstance(steps_total, int) else None,
        reward=_num(last.get("reward_mean")),
        tool_use=_num(last.get("tool_use")),
        updated=last_change(path),
        backend="verl" if (path / "verl").exists() or (path / "verl_config.yaml").exists() else "local",
    )
    summary = read_json(path / "summary.json")
    if isinstance(summary, dict):
        info.elapsed_s = _num(summary.get("total_s"))
    return info


def status(path: Path) -> str:
    """running, finished, failed, resumable or stopped (a run's ``summary.json`` says how it ended)."""
    launch = read_json(path / LAUNCH_FILE)
    if isinstance(launch, dict):
        if launch.get("rc") is None and _alive(launch.get("pid")):
            return "running"
        if launch.get("rc") not in (None, 0):
            return "failed"
    summary = read_json(path / "summary.json")
    if isinstance(summary, dict):
        ended = summary.get("status", "finished")  # verl's summaries and older ones say nothing: they finished
        if ended in ("finished", "failed"):
            return str(ended)
        if ended == "stopped":  # a resume deletes the summary first: this run is not going on
            return "resumable" if any((path / "checkpoints").glob("*/trainer.pt")) else "stopped"
    if (time.time() - last_change(path) < LIVE_WINDOW_S and has_metrics(path)) or _sft_live(path):
        return "running"
    if any((path / "checkpoints").glob("*/trainer.pt")):
        return "resumable"
    return "stopped"


def _sft_live(path: Path) -> bool:
    sft = path / "sft_metrics.jsonl"
    return sft.exists() and not has_metrics(path) and time.time() - sft.stat().st_mtime < LIVE_WINDOW_S


def _alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    try:  # a finished child that nobody reaped yet is not running
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][:1] != "Z"
    except OSError:
        return True


def last_change(path: Path) -> float:
    times = [path.stat().st_mtime]
    for name in (LOCAL_FILE, VERL_FILE, "sft_metrics.jsonl", "summary.json", "samples"):
        p = path / name
        if p.exists():
            times.append(p.stat().st_mtime)
    return max(times)


def read_config(path: Path) -> dict[str, Any]:
    import yaml

    try:
        data = yaml.safe_load((path / "config.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


def log_file(path: Path) -> Path | None:
    """The run's newest log: the launch page's, or any ``*.log`` the trainer or a wrapper wrote."""
    logs = sorted(path.glob("*.log"), key=lambda p: p.stat().st_mtime)
    return logs[-1] if logs else None


# --- warnings ------------------------------------------------------------------------------------


def warnings(metrics: list[dict[str, Any]], last_samples: list[dict[str, Any]]) -> list[str]:
    """What looks wrong: no reward variance, a rising tool error rate, all trajectories truncated, errors."""
    out = []
    groups: dict[str, list[float]] = {}
    for s in last_samples:
        r = _num(s.get("reward"))
        if r is not None:
            groups.setdefault(str(s.get("row_id")), []).append(r)
    full = [g for g in groups.values() if len(g) > 1]
    if full and all(max(g) == min(g) for g in full):
        out.append(
            f"no reward variance in any of the {len(full)} groups of the last samples: GRPO learns nothing from them"
        )
    if metrics and all(_num(m.get("reward_std")) == 0 for m in metrics[-3:]):
        out.append("reward_std is 0 in the last steps: every sample of a step got the same reward")
    rates = [r for r in (_num(m.get("tool_error_rate")) for m in metrics) if r is not None]
    if len(rates) >= 4:
        k = max(2, len(rates) // 4)
        early, late = statistics.fmean(rates[:k]), statistics.fmean(rates[-k:])
        if late > 0.2 and late > early + 0.1:
            out.append(f"tool error rate rising: {early:.2f} at the start, {late:.2f} in the last {k} steps")
    if metrics:
        last = metrics[-1]
        stops = {k[5:]: v for k, v in last.items() if k.startswith("stop/") and isinstance(v, (int, float))}
        if stops and sum(stops.values()) > 0 and all(k.startswith("max_") for k, v in stops.items() if v):
            out.append(
                f"every trajectory of step {last.get('step')} was truncated ({', '.join(sorted(k for k, v in stops.items() if v))})"
            )
        if _num(last.get("reward_errors")):
            out.append(f"{last['reward_errors']} reward errors in step {last.get('step')}: those samples scored 0")
    elif last_samples and all(s.get("truncated") for s in last_samples):
        out.append("every trajectory of the last samples was truncated")
    if last_samples:
        failed = [s for s in last_samples if s.get("reward_error")]
        if failed and not any("reward errors" in w for w in out):
            out.append(f"{len(failed)} samples have a reward error, e.g. {str(failed[0]['reward_error'])[:120]}")
        mism = sum(1 for s in last_samples if s.get("template_mismatch"))
        if mism:
            out.append(
                f"{mism} of the last samples depart from a full rendering of their messages (see their token view)"
            )
    return out


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _get(d: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d
