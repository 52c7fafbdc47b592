"""The retrieval server under load: many concurrent clients on loopback, with and without batching.

The server (``rlf-deepsearch serve``) runs in its own process; ``--clients`` clients, each on its own
keep-alive connection, send ``--requests`` single-query searches one after another (HotpotQA's
questions, topk 3, as trajectories do). Reported per server setting: queries per second, p50 and
p99 latency, and errors (any non-200 answer or failed connection).

    python benchmarks/server_load.py --clients 256 --requests 20 --batch-sizes 0,256

Prints a table and writes ``benchmarks/results/server_load.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import ssl
import subprocess
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_HOTPOT = HERE.parents[2].parent / "shared" / "data" / "qa" / "hotpotqa"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def client(url: str, queries: list[str], latencies: list[float], errors: list[str], tls: ssl.SSLContext) -> None:
    """One client: its own connection, one request at a time."""
    import httpx

    async with httpx.AsyncClient(timeout=60.0, limits=httpx.Limits(max_connections=1), verify=tls) as http:
        for query in queries:
            start = time.perf_counter()
            try:
                response = await http.post(url, json={"queries": [query], "topk": 3, "return_scores": True})
                if response.status_code != 200 or len(response.json()["result"]) != 1:
                    errors.append(f"HTTP {response.status_code}: {response.text[:100]}")
                    continue
            except Exception as exc:  # counted, never fatal: the figure is how many fail
                errors.append(f"{type(exc).__name__}: {exc}")
                continue
            latencies.append(time.perf_counter() - start)


async def load(url: str, questions: list[str], clients: int, requests: int) -> dict:
    latencies: list[float] = []
    errors: list[str] = []
    work = [[questions[(c * requests + r) % len(questions)] for r in range(requests)] for c in range(clients)]
    tls = ssl.create_default_context()  # shared: httpx builds one per client otherwise, ~0.3 s each
    start = time.perf_counter()
    await asyncio.gather(*(client(url, w, latencies, errors, tls) for w in work))
    wall = time.perf_counter() - start
    latencies.sort()

    def pct(p: float) -> float:
        return (
            round(1000 * latencies[min(len(latencies) - 1, int(p * len(latencies)))], 1) if latencies else float("nan")
        )

    return {
        "clients": clients,
        "requests": clients * requests,
        "ok": len(latencies),
        "errors": len(errors),
        "qps": round(len(latencies) / wall, 1),
        "p50_ms": pct(0.50),
        "p99_ms": pct(0.99),
        "wall_s": round(wall, 2),
        "first_error": errors[0] if errors else None,
    }


def serve(corpus: Path, index_dir: Path | None, port: int, batch_size: int, retriever: str) -> subprocess.Popen:
    from rlf_deepsearch.node_server import server_command
    from rlf_deepsearch.settings import Settings

    s = Settings()  # the plugin's defaults, as a run's node server gets them
    cmd = server_command(corpus, retriever, index_dir, s.encoder, s.index_kind, s.k1, s.b, s.stemmer, batch_size)
    cmd[cmd.index("--port") + 1] = str(port)
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    import httpx

    deadline = time.monotonic() + 900  # a first dense build takes minutes
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server_load: the server exited: {proc.stderr.read() if proc.stderr else ''}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1.0).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("server_load: the server did not come up")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hotpotqa", type=Path, default=DEFAULT_HOTPOT)
    parser.add_argument("--index-dir", type=Path, default=None)
    parser.add_argument("--retriever", default="bm25", choices=["bm25", "dense", "hybrid"])
    parser.add_argument("--clients", type=int, default=256)
    parser.add_argument("--requests", type=int, default=20, help="requests per client")
    parser.add_argument("--batch-sizes", default="0,256", help="server --batch-size values to compare (0: off)")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "server_load.json")
    args = parser.parse_args(argv)

    corpus, qfile = args.hotpotqa / "corpus.jsonl", args.hotpotqa / "questions.jsonl"
    if not corpus.is_file():
        raise SystemExit(f"server_load: no corpus.jsonl under {args.hotpotqa}")
    questions = [json.loads(line)["question"] for line in qfile.read_text().splitlines() if line.strip()]
    rows = []
    for batch_size in (int(b) for b in args.batch_sizes.split(",")):
        port = free_port()
        proc = serve(corpus, args.index_dir, port, batch_size, args.retriever)
        try:
            row = asyncio.run(load(f"http://127.0.0.1:{port}/retrieve", questions, args.clients, args.requests))
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        rows.append({"retriever": args.retriever, "batch_size": batch_size, **row})
        print(f"measured batch_size {batch_size}", flush=True)
    cols = ["retriever", "batch_size", "clients", "requests", "errors", "qps", "p50_ms", "p99_ms"]
    print(" | ".join(f"{c:>10}" for c in cols))
    for r in rows:
        print(" | ".join(f"{r[c]!s:>10}" for c in cols))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    machine = {"cpus": os.cpu_count(), "load_1m": round(os.getloadavg()[0], 1)}
    args.out.write_text(json.dumps({"machine": machine, "results": rows}, indent=2) + "\n")
    if any(r["errors"] for r in rows):
        raise SystemExit(f"server_load: errors under load: {[r['first_error'] for r in rows if r['errors']]}")


if __name__ == "__main__":
    main()
