"""Judge throughput against a chat server of fixed latency, as the concurrency limit grows.

A loopback server (rlfcore.testing's OpenAIServer, in its own process) answers every request after a fixed
delay, like a judge model whose generation always takes that long. For each concurrency limit the
judge scores distinct samples (cache off) and we report requests per second, the ideal
(concurrency / latency), and the plugin's overhead per request: the time a concurrency slot spends
per request beyond the server's fixed latency (HTTP client, loopback, the server's own handling,
prompt building, parsing). A second figure isolates the in-process cost: prompt, cache key and parse
of one request without any I/O.

    python plugins/rlf-judge-qwq/benchmarks/judge_throughput.py [--delay-s 0.05] [--concurrency 1,2,4,...]

Prints a table and writes benchmarks/results/judge_throughput.json beside this script.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from rlf_judge_qwq import endpoints
from rlf_judge_qwq.cache import request_key
from rlf_judge_qwq.judge import Judge
from rlf_judge_qwq.prompts import pointwise_messages, subject_of
from rlf_judge_qwq.settings import JudgeSettings
from rlf_judge_qwq.verdict import parse_pointwise

from rlfcore import Sample

HERE = Path(__file__).resolve().parent
VERDICT = "<think>\nThe response gives the product, 42, which matches the reference.\n</think>\n\nVERDICT: 9"


def samples(n: int, tag: str) -> list[Sample]:
    out = []
    for i in range(n):
        response = f"Six times seven is 42 ({tag} {i})."
        messages = [{"role": "user", "content": "What is 6 x 7?"}, {"role": "assistant", "content": response}]
        out.append(Sample(id=f"{tag}-{i}", env="bench", messages=messages, response=response, ground_truth="42"))
    return out


def start_server(delay_s: float) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlfcore.testing.openai_server", "--delay-s", str(delay_s), "--content", VERDICT],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    if not url.startswith("http"):
        proc.kill()
        raise RuntimeError(f"the benchmark server did not start (said {url!r})")
    return proc, url


async def one_level(
    urls: list[str], concurrency: int, requests: int, delay_s: float, per_client: int
) -> dict[str, Any]:
    endpoints.CONNECTIONS_PER_CLIENT = per_client
    settings = JudgeSettings(endpoints=urls, concurrency=concurrency, cache_size=0, retries=0, parse_retries=0)
    judge = Judge(settings)
    await judge.judge_group(samples(concurrency, "warm"))  # open the connections
    judge.metrics.reset()
    batch = samples(requests, f"c{concurrency}")
    start = time.perf_counter()
    scores = await judge.judge_group(batch)
    wall = time.perf_counter() - start
    await judge.aclose()
    failed = sum(1 for s in scores if s is None or s.error)
    snap = judge.metrics.snapshot()
    slot_s = wall * concurrency / requests
    return {
        "concurrency": concurrency,
        "connections_per_client": min(per_client, concurrency),
        "requests": requests,
        "failed": failed,
        "wall_s": wall,
        "requests_per_s": requests / wall,
        "ideal_per_s": concurrency / delay_s,
        "efficiency": requests / wall / (concurrency / delay_s),
        "overhead_ms": (slot_s - delay_s) * 1000,
        "client_latency_ms": {k: v * 1000 for k, v in snap["latency_s"].items() if k != "count" and v is not None},
    }


def in_process_cost(n: int = 2000) -> dict[str, float]:
    """Microseconds per request for the work done without I/O: prompt, cache key, parse."""
    settings = JudgeSettings()
    batch = samples(n, "cpu")
    start = time.perf_counter()
    for s in batch:
        messages = pointwise_messages(subject_of(s, settings), settings)
        request_key(settings.model, messages, {"temperature": 0.6})
        parse_pointwise(VERDICT, 0, 10)
    return {"prompt_key_parse_us": (time.perf_counter() - start) / n * 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delay-s", type=float, default=0.05, help="the server's fixed latency")
    parser.add_argument("--concurrency", default="1,2,4,8,16,32,64")
    parser.add_argument("--rounds", type=int, default=8, help="requests per level = rounds x concurrency (at least 32)")
    parser.add_argument("--servers", type=int, default=1, help="server processes, balanced over")
    parser.add_argument(
        "--baseline", action="store_true", help="also run the top level with one httpx client for all connections"
    )
    parser.add_argument("--out", type=Path, default=HERE / "results" / "judge_throughput.json")
    args = parser.parse_args()

    procs = [start_server(args.delay_s) for _ in range(args.servers)]
    urls = [url for _, url in procs]
    rows = []
    try:
        levels = [int(x) for x in args.concurrency.split(",")]
        runs = [(c, endpoints.CONNECTIONS_PER_CLIENT) for c in levels]
        runs += [(levels[-1], levels[-1])] if args.baseline else []
        for c, per_client in runs:
            rows.append(asyncio.run(one_level(urls, c, max(32, args.rounds * c), args.delay_s, per_client)))
    finally:
        for proc, _ in procs:
            proc.kill()
            proc.wait()
    cpu = in_process_cost()

    print(f"judge throughput: server latency {args.delay_s * 1000:g} ms, {args.servers} server process(es), cache off")
    header = ("conc", 5), ("conn/client", 11), ("reqs", 5), ("req/s", 8), ("ideal", 8), ("eff", 6), ("overhead ms", 12)
    header += ("p50 ms", 8), ("p99 ms", 8), ("failed", 7)
    print(" ".join(f"{name:>{width}}" for name, width in header))
    for r in rows:
        lat = r["client_latency_ms"]
        print(
            f"{r['concurrency']:>5} {r['connections_per_client']:>11} {r['requests']:>5} "
            f"{r['requests_per_s']:>8.1f} {r['ideal_per_s']:>8.1f} "
            f"{r['efficiency']:>6.1%} {r['overhead_ms']:>12.2f} {lat['p50']:>8.2f} {lat['p99']:>8.2f} {r['failed']:>7}"
        )
    print(f"in-process cost (prompt + cache key + parse, no I/O): {cpu['prompt_key_parse_us']:.1f} us per request")

    args.out.parent.mkdir(parents=True, exist_ok=True)
    result = {
        "benchmark": "judge_throughput",
        "delay_s": args.delay_s,
        "servers": args.servers,
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "levels": rows,
        "in_process": cpu,
    }
    args.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
