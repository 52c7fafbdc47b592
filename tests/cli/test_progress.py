"""A run redirected to a log shows it is alive: one flushed line per GRPO step (and per 5% of SFT, and of
an eval's rows), with reward, tool use and time, while the run goes on. The README's main command,
shortened to three steps, with its real MCP calculator; stdout is a plain file, as in ``> train.log``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from tests.support import ROOT

EXAMPLE = ROOT / "examples" / "calculator"
SMALL = [
    "sft.steps=20",
    "sft.batch_size=4",
    "trainer.steps=3",
    "trainer.prompts_per_step=2",
    "rollout.n=2",
    "model.init.hidden_size=32",
    "model.init.num_layers=1",
    "model.init.intermediate_size=64",
]


def _rlf(args: list[str], log, cwd) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLF_")}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.Popen(
        [sys.executable, "-m", "rlfcore", *args], stdout=log, stderr=subprocess.STDOUT, cwd=cwd, env=env
    )


def test_train_and_eval_redirected_to_a_file_print_a_line_per_step(tmp_path):
    pytest.importorskip("rlf_mcp", reason="rlf-mcp is not installed (pip install -e plugins/rlf-mcp)")
    for name in ("run.yaml", "questions.jsonl", "demos.jsonl", "eval.jsonl"):
        shutil.copy(EXAMPLE / name, tmp_path / name)
    log = tmp_path / "train.log"
    with log.open("w") as f:
        proc = _rlf(["train", "run.yaml", "--run-dir", "run", *SMALL], f, tmp_path)
        seen_alive = False
        deadline = time.monotonic() + 300
        while proc.poll() is None and time.monotonic() < deadline:
            if "grpo step 1/3" in log.read_text():
                seen_alive = proc.poll() is None  # the line is in the file while the run still works
                break
            time.sleep(0.05)
        assert proc.wait(timeout=300) == 0, log.read_text()[-3000:]
    text = log.read_text()
    assert seen_alive, text
    steps = re.findall(
        r"^grpo step (\d)/3  reward \d\.\d{3}  tool use \d\.\d\d  loss [+-]\d\.\d{4}  step \d+\.\d s  \d+\.\d s$",
        text,
        re.M,
    )
    assert steps == ["1", "2", "3"], text
    assert re.search(r"^sft step 20/20  loss \d+\.\d{3}", text, re.M), text
    assert "━" not in text  # no bar drawn into the log

    eval_log = tmp_path / "eval.log"
    with eval_log.open("w") as f:
        code = _rlf(
            [
                "eval",
                "run.yaml",
                "--greedy",
                "--limit",
                "4",
                "model.path=run/checkpoints/step_000003/model",
                "--out",
                "eval.jsonl.out",
            ],
            f,
            tmp_path,
        ).wait(timeout=300)
    text = eval_log.read_text()
    assert code == 0, text
    assert re.findall(r"^eval (\d)/4 rows  reward \d\.\d{3}  tool use \d\.\d\d  errors 0", text, re.M) == [
        "1",
        "2",
        "3",
        "4",
    ], text
    assert len((tmp_path / "eval.jsonl.out").read_text().splitlines()) == 4  # --greedy: one sample per row
