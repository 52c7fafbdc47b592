"""Verification throughput on GeoQuery: the plugin's parallel path against a plain serial loop.

Samples: for every GeoQuery example, its gold SQL and a deterministic perturbation of it
(:mod:`rlf_nl2sql.perturb`), each as a final answer in a ```sql fence: 2 × 872 samples, verified
against the gold SQL on ``geography.sqlite``. Ways to verify them, taking turns ``--repeat`` times
(the best time of each is reported), each checked to give the same verdicts:

- ``serial loop``: the plain way: per sample, open a read-only connection, run the gold and the
  predicted SQL, compare with :func:`~rlf_nl2sql.compare.results_match`; one at a time.
- ``plugin inline, 1 thread``: :meth:`Verifier.verify` called in a loop (sessions kept open, each
  gold query run once).
- ``plugin, thread pool`` and ``plugin, process pool``: what ``verify_tool`` does in a run (the
  ``verify_pool`` setting picks one): every sample's ``verify_async`` gathered at once and run in
  chunks on a warm pool of ``--workers`` (default one per CPU). Gold results are cleared before
  each run.

Run: ``python plugins/rlf-nl2sql/benchmarks/verify_throughput.py [--repeat 3 --workers N --limit K]``.
Prints a table; writes JSON to ``plugins/rlf-nl2sql/benchmarks/results/verify_throughput.json`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sqlite3
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlf_nl2sql.answer import extract_sql
from rlf_nl2sql.compare import results_match
from rlf_nl2sql.database import Session
from rlf_nl2sql.perturb import Facts, perturb
from rlf_nl2sql.sqltext import has_top_level_order_by
from rlf_nl2sql.verify import Verifier

HERE = Path(__file__).resolve().parent
SHARED_DATA = Path(os.environ.get("RLF_SHARED_DATA", HERE.parents[3] / "shared" / "data"))
DEFAULT_OUT = HERE / "results" / "verify_throughput.json"

Item = tuple[str, str, str]
"""``(database path, gold SQL, final answer)``."""


def load_items(folder: Path, limit: int | None = None) -> tuple[list[Item], list[bool]]:
    """The gold/perturbed samples of GeoQuery, and for each whether it is the gold (expected to pass)."""
    db = folder / "geography.sqlite"
    rows = [json.loads(line) for line in (folder / "geoquery.jsonl").read_text().splitlines() if line.strip()]
    rows = rows[:limit] if limit else rows
    with Session(db) as session:
        facts = Facts(session)
        items, is_gold = [], []
        for row in rows:
            gold = row["gold_sql"]
            near = perturb(gold, facts)
            for sql, golden in ((gold, True), (near.sql if near else None, False)):
                if sql is not None:
                    items.append((str(db), gold, f"```sql\n{sql}\n```"))
                    is_gold.append(golden)
    return items, is_gold


def serial_loop(items: list[Item]) -> list[bool]:
    verdicts = []
    for db, gold, answer in items:
        conn = sqlite3.connect(f"file:{urllib.parse.quote(db)}?mode=ro", uri=True)
        try:
            expected = conn.execute(gold).fetchall()
            try:
                got = conn.execute(extract_sql(answer).sql).fetchall()
            except sqlite3.Error:
                verdicts.append(False)
                continue
            verdicts.append(results_match(expected, got, ordered=has_top_level_order_by(gold)))
        finally:
            conn.close()
    return verdicts


def plugin_inline(items: list[Item]) -> list[bool]:
    verifier = Verifier(workers=1, pool="thread")
    return [verifier.verify(*item).passed for item in items]


def plugin_parallel(verifier: Verifier) -> Callable[[list[Item]], list[bool]]:
    """``verify_tool``'s path: every sample's ``verify_async`` gathered at once, on a warm pool."""

    def run(items: list[Item]) -> list[bool]:
        async def gather() -> list[bool]:
            return [r.passed for r in await asyncio.gather(*(verifier.verify_async(*item) for item in items))]

        verifier.clear()  # each run computes its gold results afresh, like the other ways
        return asyncio.run(gather())

    return run


def timed(fn: Callable[[list[Item]], list[bool]], items: list[Item]) -> tuple[float, list[bool]]:
    start = time.perf_counter()
    verdicts = fn(items)
    return time.perf_counter() - start, verdicts


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=SHARED_DATA / "nl2sql" / "geoquery")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--limit", type=int, help="use only the first N examples")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)

    items, is_gold = load_items(args.data, args.limit)
    threads = Verifier(workers=args.workers, pool="thread")
    processes = Verifier(workers=args.workers, pool="process")
    processes.verify_many(items[: args.workers * 4])  # start the processes before timing
    ways = {  # each way with the workers it uses, for the report
        "serial loop": (serial_loop, 1),
        "plugin inline, 1 thread": (plugin_inline, 1),
        "plugin, thread pool": (plugin_parallel(threads), args.workers),
        "plugin, process pool": (plugin_parallel(processes), args.workers),
    }
    best = {name: float("inf") for name in ways}
    reference: list[bool] | None = None
    try:
        for _ in range(args.repeat):  # the ways take turns, so a busy spell on the machine hits them alike
            for name, (fn, _) in ways.items():
                seconds, verdicts = timed(fn, items)
                best[name] = min(best[name], seconds)
                reference = reference or verdicts
                if verdicts != reference:
                    wrong = sum(a != b for a, b in zip(verdicts, reference))
                    raise SystemExit(f"{name} disagrees with the serial loop on {wrong} samples")
    finally:
        threads.close()
        processes.close()
    rows = [
        {"way": name, "workers": workers, "seconds": best[name], "us_per_sample": best[name] / len(items) * 1e6}
        for name, (_, workers) in ways.items()
    ]
    serial = rows[0]["seconds"]
    for row in rows:
        row["speedup_vs_serial"] = serial / row["seconds"]
    assert reference is not None
    gold_pass = sum(v for v, g in zip(reference, is_gold) if g) / max(1, sum(is_gold))
    perturbed_zero = sum(not v for v, g in zip(reference, is_gold) if not g) / max(1, len(is_gold) - sum(is_gold))
    report = {
        "samples": len(items),
        "gold_scored_1": gold_pass,
        "perturbed_scored_0": perturbed_zero,
        "repeat": args.repeat,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "results": rows,
    }
    _print(report)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written to {args.out}")
    return report


def _print(report: dict[str, Any]) -> None:
    print(
        f"{report['samples']} samples (gold scored 1: {report['gold_scored_1']:.1%}, perturbed scored 0: "
        f"{report['perturbed_scored_0']:.1%}), {report['cpus']} CPUs, best of {report['repeat']}"
    )
    print(f"{'way':<28} {'workers':>7} {'seconds':>8} {'µs/sample':>10} {'vs serial':>9}")
    for r in report["results"]:
        print(
            f"{r['way']:<28} {r['workers']:>7} {r['seconds']:>8.3f} {r['us_per_sample']:>10.1f} {r['speedup_vs_serial']:>8.2f}x"
        )


if __name__ == "__main__":
    main()
