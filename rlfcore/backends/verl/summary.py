"""``RUN/summary.json`` for a verl run, as the local backend writes it: ``rlf ui`` shows a run with one
as finished, so a verl run that ended well gets one (from verl's metrics, in rlf's names) and a run
starting or resuming loses its old one until it ends."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rlfcore.rundata.metrics import read_metrics_from, summarize

FILE = "summary.json"


def clear(run_dir: str | Path) -> None:
    """Drop the summary of an earlier attempt: a run that is training again is not finished."""
    (Path(run_dir) / FILE).unlink(missing_ok=True)


def write(run_dir: str | Path, total_s: float) -> dict[str, Any]:
    """Summarise every step verl logged (``verl_metrics.earlier.jsonl``, then ``verl_metrics.jsonl``)
    the way a local run's is (:func:`rlfcore.rundata.metrics.summarize`); returns what was written."""
    run = Path(run_dir)
    rows, _ = read_metrics_from(run)
    summary = {"backend": "verl", **summarize(rows, total_s=total_s)}
    (run / FILE).write_text(json.dumps(summary, indent=2))
    return summary
