"""The real-model example through verl's real trainer on the CPU: ``rlf train
examples/smollm2-calculator/run.yaml --backend verl`` (SmolLM2-135M-Instruct as ``rlf models fetch``
makes it, rlf's SFT warm start with LoRA, then verl's GRPO with its own LoRA, vLLM-CPU rollout, the
``rlf_agent`` loop and rlf-mcp's calculator) for 2 steps with a checkpoint each, then ``--resume``
for a 3rd. The same checks as the tiny model's end-to-end test (``gpu_check.check``), plus
rollout/actor agreement on the real weights.

Opt-in (``RLF_VERL_CPU_REAL_MODEL=1``): 25 to 40 minutes on 2 shared cores, most of it the 40 SFT
steps and vLLM-CPU's start, over the ~8 minutes CI may add; docs/verl.md gives the measured run.
Needs the verl CPU venv (``scripts/setup-verl-cpu.sh``) like the tiny model's test.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests import verl_cpu
from tests.support import ROOT

PYTHON = Path(os.environ.get("RLF_VERL_CPU_PYTHON") or ROOT / ".venv-verl-cpu" / "bin" / "python")
CONFIG = ROOT / "examples" / "smollm2-calculator" / "run.yaml"
SMALL = [
    "trainer.prompts_per_step=4",
    "trainer.checkpoint_every=1",
    "sft.steps=10",
    "rollout.sampling.temperature=1.0",
]
"""4 questions × the example's 4 samples a step: the mechanics on the real network, not the curve. A
shorter warm start, sampled hotter: after the example's 40 SFT steps at 0.7, every group of 3 steps
agreed within itself (reward variance 0, so no gradient to check)."""
RAW = [
    "trainer.logger=[console,file]",
    "actor_rollout_ref.rollout.enforce_eager=true",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.3",
    "actor_rollout_ref.rollout.agent.num_workers=1",
    "reward.num_workers=1",
]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("RLF_VERL_CPU_REAL_MODEL") != "1", reason="set RLF_VERL_CPU_REAL_MODEL=1"),
    pytest.mark.skipif(not PYTHON.is_file(), reason=f"no verl CPU venv at {PYTHON}: scripts/setup-verl-cpu.sh"),
]


def _train(run: Path, steps: int, ray_temp: Path, log: Path) -> verl_cpu.Session:
    cmd = [
        str(PYTHON.with_name("rlf")),
        "train",
        str(CONFIG),
        f"trainer.steps={steps}",
        *SMALL,
        "--backend",
        "verl",
        "--run-dir",
        str(run),
        *(["--resume"] if steps > 2 else []),
        "--",
        *RAW,
        *verl_cpu.overrides(ray_temp),
        # the CPU harness's 64 MB buckets split the tied embedding from its head: one bucket for the
        # whole model (hydra.tied_sync asks for that only past verl's 2 GB default)
        "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes=1024",
    ]
    with log.open("w") as out:
        return verl_cpu.run_session(cmd, {**os.environ, **verl_cpu.ENV}, timeout_s=3600, stdout=out)


def test_the_real_model_trains_through_verl_and_resumes(tmp_path):
    subprocess.run([str(PYTHON.with_name("rlf")), "models", "fetch", "smollm2-135m-instruct"], check=True, timeout=900)
    run = tmp_path / "run"
    ray_temp = Path(tempfile.mkdtemp(prefix="rlfray", dir="/tmp"))  # short: Ray's socket paths
    try:
        first = _train(run, 2, ray_temp, tmp_path / "first.log")
        assert first.returncode == 0, (tmp_path / "first.log").read_text()[-4000:]
        resumed = _train(run, 3, ray_temp, tmp_path / "resume.log")
        assert resumed.returncode == 0, (tmp_path / "resume.log").read_text()[-4000:]
    finally:
        shutil.rmtree(ray_temp, ignore_errors=True)
    out = subprocess.run(
        [
            str(PYTHON),
            "-c",
            "import json, sys, pathlib; from rlfcore.backends.verl.gpu_check import check; "
            "print(json.dumps(check(pathlib.Path(sys.argv[1]))))",
            str(run),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    summary, problems = json.loads(out.stdout)
    for phase, session in (("first", first), ("resume", resumed)):
        print(
            f"real model through verl, {phase}: {session.seconds:.0f} s, peak PSS {session.peak_pss_mib / 1024:.1f} GiB"
        )
    print("steps:", json.dumps(summary["steps"]), "calling:", summary["samples_calling"])
    assert problems == [], problems
    # vLLM samples from the weights verl syncs (the LoRA adapters on the merged warm start)
    for step, m in summary["steps"].items():
        assert m["training/rollout_probs_diff_mean"] < 0.01, (step, m)
    assert first.leftover_processes == [] and resumed.leftover_processes == []
