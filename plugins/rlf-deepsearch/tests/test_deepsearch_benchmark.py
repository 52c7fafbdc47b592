"""The benchmark script runs end to end at a tiny size (the real figures come from a full run)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bm25_search.py"


def test_benchmark_smoke(tmp_path):
    out = tmp_path / "out.json"
    done = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--synthetic-size",
            "2000",
            "--num-queries",
            "40",
            "--rank-bm25-seconds",
            "5",
            "--hotpotqa",
            str(tmp_path / "absent"),
            "--work-dir",
            str(tmp_path),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "synthetic-2000" in done.stdout and "rank-bm25" in done.stdout
    results = {r["engine"]: r for r in json.loads(out.read_text())["results"]}
    assert set(results) == {"bm25s", "rank-bm25"}
    ours, theirs = results["bm25s"], results["rank-bm25"]
    assert ours["passages"] == theirs["passages"] == 2000
    for key in ("build_s", "load_s", "qps_single", "qps_batched", "peak_rss_mb", "recall@5"):
        assert ours[key] > 0, key
    assert ours["recall@5"] > 0.5  # queries are 4 words of their passage: BM25 should find most
    # the corpus is generated deterministically: a second generation gives the same bytes
    first = (tmp_path / "synthetic-2000.jsonl").read_bytes()
    sys.path.insert(0, str(SCRIPT.parent))
    from bm25_search import synthetic_corpus

    again, _ = synthetic_corpus(2000, tmp_path / "again")
    assert again.read_bytes() == first
