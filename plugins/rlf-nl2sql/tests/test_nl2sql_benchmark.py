"""The throughput benchmark runs end to end at a tiny size (its figures are in the README, not checked here)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

BENCHMARK = Path(__file__).resolve().parents[1] / "benchmarks" / "verify_throughput.py"


def test_benchmark_smoke(shared_data, tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("nl2sql_verify_throughput", BENCHMARK)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "result.json"
    bench.main(
        [
            "--data",
            str(shared_data / "nl2sql" / "geoquery"),
            "--limit",
            "12",
            "--repeat",
            "1",
            "--workers",
            "2",
            "--out",
            str(out),
        ]
    )
    report = json.loads(out.read_text())
    assert report["samples"] == 24 and report["gold_scored_1"] == 1.0
    assert [r["way"] for r in report["results"]] == [
        "serial loop",
        "plugin inline, 1 thread",
        "plugin, thread pool",
        "plugin, process pool",
    ]
    assert all(r["us_per_sample"] > 0 for r in report["results"])
    assert "µs/sample" in capsys.readouterr().out
