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

from rlfcore.evaluation import k_values, pass_at_k
from rlfcore.rundata.files import read_json
from rlfcore.rundata.metrics import LOCAL_FILE, VERL_EARLIER_FILE, VERL_FILE, has_metrics, read_metrics_tail
from rlfcore.ui.samples import SampleFiles, SampleIndex, eval_outputs

LIVE_WINDOW_S = 120.0
"""A run whose files changed this recently counts as running."""

TREND_STEPS = 2
"""Steps, at least, at each end of a run's metrics when a trend is read (else the first and last quarter)."""
TOOL_ERRORS_HIGH, TOOL_ERRORS_RISE = 0.2, 0.1
"""A tool error rate is warned of when, in the last steps, it is above the first and has risen by the second."""

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

STOP_CODES = (130, 143, -2, -15)
"""Exit codes of a process that SIGINT or SIGTERM ended: rlf's own (128 + the signal, after cleaning up),
or ``Popen``'s negative signal number for one the signal killed outright."""


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
    evaluation: dict[str, Any] | None = None
    """An eval run's figures (:func:`eval_summary`), for the list and its page in place of steps and curves."""
    extra: dict[str, Any] = field(default_factory=dict)


def find_runs(root: Path, files: SampleFiles | None = None) -> list[RunInfo]:
    """The run folders under ``root`` (``root`` itself included, two levels down), newest first; an eval
    run's figures come from ``files``' index of its output when given."""
    found: list[Path] = []
    if _is_run(root):
        found.append(root)
    for child in sorted(root.iterdir()) if root.is_dir() else []:
        if child.is_dir() and not child.name.startswith("."):
            if _is_run(child):
                found.append(child)
            else:
                found.extend(g for g in sorted(child.iterdir()) if g.is_dir() and _is_run(g))
    runs = [run_info(root, p, files) for p in found]
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


def run_info(root: Path, path: Path, files: SampleFiles | None = None) -> RunInfo:
    """One run's row: a training run's last step, or an eval run's figures over its output file."""
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
    launch = read_json(path / LAUNCH_FILE)
    if info.elapsed_s is None and isinstance(launch, dict):
        started, ended = _num(launch.get("started")), _num(launch.get("ended"))
        info.elapsed_s = ended - started if started is not None and ended is not None else None
    if is_eval(path):
        info.kind = "eval"
        out = eval_file(path)
        if out is not None:
            info.evaluation = eval_summary(files.get(out) if files is not None else SampleIndex(out).refresh())
            info.reward, info.tool_use = info.evaluation["reward_mean"], info.evaluation["tool_use"]
    return info


def eval_file(path: Path) -> Path | None:
    """The ``rlf eval`` output in a run folder (the launch page writes ``eval.jsonl``), the newest if several."""
    found = sorted(eval_outputs(path), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def is_eval(path: Path) -> bool:
    """An eval run: ``rlf eval`` output (or an eval launch not yet writing it) and no training metrics."""
    if has_metrics(path) or (path / "sft_metrics.jsonl").exists():
        return False
    launch = read_json(path / LAUNCH_FILE)
    return eval_file(path) is not None or (isinstance(launch, dict) and launch.get("kind") == "eval")


def eval_summary(index: SampleIndex) -> dict[str, Any]:
    """An eval's figures over the trajectories its file holds so far, as ``rlf eval`` prints them at the end."""
    entries = index.entries
    n = len(entries)
    rewards = [e.reward for e in entries if e.reward is not None]
    calls = sum(e.tool_calls for e in entries)
    components: dict[str, list[float]] = {}
    for e in entries:
        for k, v in e.components.items():
            components.setdefault(k, []).append(v)
    stops: dict[str, int] = {}
    for e in entries:
        stops[e.stop_reason or "?"] = stops.get(e.stop_reason or "?", 0) + 1
    return {
        "file": index.path.name,
        "trajectories": n,
        "rows": len(index.groups),
        "reward_mean": statistics.fmean(rewards) if rewards else None,
        "reward_std": statistics.pstdev(rewards) if rewards else None,
        "components": {k: statistics.fmean(v) for k, v in sorted(components.items())},
        "tool_use": sum(1 for e in entries if e.tool_calls) / n if n else None,
        "tool_calls_per_trajectory": calls / n if n else None,
        "tool_error_rate": sum(e.tool_errors for e in entries) / calls if calls else None,
        "stop_reasons": dict(sorted(stops.items(), key=lambda kv: -kv[1])),
        "reward_errors": sum(1 for e in entries if e.reward_error),
        "template_mismatches": sum(1 for e in entries if e.mismatch),
        "pass_at_k": _pass_at_k(index),
    }


def _pass_at_k(index: SampleIndex, solved_at: float = 1.0) -> dict[int, float]:
    """pass@k as ``rlf eval`` reports it (a sample solves its row at reward ``solved_at``, its default),
    over the rows whose samples are all written; empty with one sample a row."""
    rows = [[index.entries[i].reward or 0.0 for i in group] for group in index.groups.values()]
    n = min((len(r) for r in rows), default=0)
    if n <= 1:
        return {}
    return {
        k: statistics.fmean(pass_at_k(len(r), sum(1 for x in r if x >= solved_at), k) for r in rows)
        for k in k_values(n)
    }


def status(path: Path) -> str:
    """running, finished, failed, resumable, stopped, or for an eval with no exit code on record, ended.

    A launched process's exit code decides first: non-zero is failed, unless a stop (the UI's button,
    SIGINT, SIGTERM) ended it. Then an eval run is finished by exit code 0; a training run ended as its
    ``summary.json`` says. A run with no process on record is running while its files change."""
    launch = read_json(path / LAUNCH_FILE)
    ended = False  # a process launched from the UI is known to be over
    rc: Any = None
    if isinstance(launch, dict):
        rc = launch.get("rc")
        if rc is None and _alive(launch.get("pid")):
            return "running"
        ended = True
        stopped = bool(launch.get("stopped")) or rc in STOP_CODES
        if rc not in (None, 0) and not stopped:
            return "failed"
        if stopped and launch.get("kind") == "eval":
            return "stopped"
    if is_eval(path):
        if rc == 0:
            return "finished"
        if not ended and time.time() - last_change(path) < LIVE_WINDOW_S:
            return "running"
        return "ended"  # started by hand, or by a UI that ended before it did: how it ended is not known
    summary = read_json(path / "summary.json")
    if isinstance(summary, dict):
        ended = summary.get("status", "finished")  # verl's summaries and older ones say nothing: they finished
        if ended in ("finished", "failed"):
            return str(ended)
        if ended == "stopped":  # a resume deletes the summary first: this run is not going on
            return "resumable" if any((path / "checkpoints").glob("*/trainer.pt")) else "stopped"
    if not ended and ((time.time() - last_change(path) < LIVE_WINDOW_S and has_metrics(path)) or _sft_live(path)):
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
    for name in (LOCAL_FILE, VERL_FILE, "sft_metrics.jsonl", "summary.json", "samples", LAUNCH_FILE):
        p = path / name
        if p.exists():
            times.append(p.stat().st_mtime)
    times.extend(p.stat().st_mtime for p in eval_outputs(path))
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


def warnings(metrics: list[dict[str, Any]], last_samples: list[dict[str, Any]], group_size: int | None) -> list[str]:  # noqa: PLR0912 - one independent check per warning
    """What looks wrong: no reward variance, a rising tool error rate, all trajectories truncated, errors.

    ``group_size`` is the number of samples of a whole GRPO group (``rollout.n``; None when unknown). A
    step saves only ``trainer.samples_per_step`` of its samples, often part of one group, and a part
    that scored alike says nothing of its group: only groups the saved samples hold whole are judged,
    the others through the step's own ``reward_std`` and ``active_fraction``."""
    out = []
    groups: dict[str, list[float]] = {}
    for s in last_samples:
        r = _num(s.get("reward"))
        if r is not None:
            groups.setdefault(str(s.get("row_id")), []).append(r)
    whole = [g for g in groups.values() if len(g) > 1 and group_size is not None and len(g) >= group_size]
    if whole and all(max(g) == min(g) for g in whole):
        out.append(
            f"no reward variance in any of the {len(whole)} whole groups of the last samples: "
            "GRPO learns nothing from them"
        )
    if metrics and all(_num(m.get("reward_std")) == 0 for m in metrics[-3:]):
        out.append("reward_std is 0 in the last steps: every sample of a step got the same reward")
    elif not out and metrics and all(_num(m.get("active_fraction")) == 0 for m in metrics[-3:]):
        out.append(
            "active_fraction is 0 in the last steps: in every group all samples scored alike, so GRPO learns nothing"
        )
    rates = [r for r in (_num(m.get("tool_error_rate")) for m in metrics) if r is not None]
    if len(rates) >= 2 * TREND_STEPS:
        k = max(TREND_STEPS, len(rates) // 4)
        early, late = statistics.fmean(rates[:k]), statistics.fmean(rates[-k:])
        if late > TOOL_ERRORS_HIGH and late > early + TOOL_ERRORS_RISE:
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
