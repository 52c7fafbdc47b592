"""Latency of a trivial call in a warm sandbox at 1, 16 and 64 concurrent sessions, against a bare
``subprocess.run(python -c ...)`` per call and an in-process ``exec``.

python plugins/rlf-code/benchmarks/call_latency.py [--calls 200] [--sessions 1 16 64]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from rlf_code.layers import detect
from rlf_code.sandbox import Sandbox
from rlf_code.settings import Limits

CODE = "x = 1 + 1\nx"


def timed(fn: Callable[[], object], n: int) -> list[float]:
    out = []
    for _ in range(n):
        began = time.perf_counter()
        fn()
        out.append(time.perf_counter() - began)
    return out


def report(name: str, latencies: list[float], wall: float) -> None:
    q = statistics.quantiles(latencies, n=100)
    print(f"{name:<34} p50 {q[49] * 1000:8.2f} ms  p99 {q[98] * 1000:8.2f} ms  {len(latencies) / wall:9.0f} calls/s")


def sandboxes(sessions: int, calls: int) -> None:
    layers = detect()
    boxes = [Sandbox(Limits(), layers).start() for _ in range(sessions)]
    try:
        for box in boxes:
            box.call(CODE)
        began = time.perf_counter()
        with ThreadPoolExecutor(sessions) as pool:
            runs = list(pool.map(lambda box: timed(lambda: box.call(CODE), calls), boxes))
        wall = time.perf_counter() - began
        report(f"sandbox, {sessions} sessions", [t for run in runs for t in run], wall)
    finally:
        for box in boxes:
            box.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=200, help="calls per session")
    parser.add_argument("--sessions", type=int, nargs="+", default=[1, 16, 64])
    args = parser.parse_args()
    print(f"layers: {detect().describe(network=False)}")
    namespace: dict[str, object] = {}
    began = time.perf_counter()
    report("in-process exec", timed(lambda: exec(CODE, namespace), args.calls), time.perf_counter() - began)
    n = max(20, args.calls // 10)
    cmd = [sys.executable, "-c", "print(1 + 1)"]
    began = time.perf_counter()
    report(
        "subprocess.run(python -c)",
        timed(lambda: subprocess.run(cmd, capture_output=True, check=False), n),
        time.perf_counter() - began,
    )
    for sessions in args.sessions:
        sandboxes(sessions, args.calls)
    box = Sandbox(Limits(), detect())
    began = time.perf_counter()
    starts = timed(lambda: box.start().close(), 20)
    report("sandbox start + close (no pool)", starts, time.perf_counter() - began)


if __name__ == "__main__":
    main()
