"""``trainer.resample_zero_variance``: DAPO's dynamic sampling in the local trainer.

A scripted policy whose flat and varied rows are known checks the bookkeeping; the embedded calculator
task (a real MCP server, a tiny model after a short SFT) shows the trained batches holding fewer
groups that teach nothing than the same run without it.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from rlfcore import hookimpl
from rlfcore.data import normalize_row
from rlfcore.engines.scripted import ScriptedEngine
from tests.support import ROOT
from tests.support.rlf import run_rlf
from tests.support.samples import TINY_SIZES

VARIED = {f"r{i}" for i in range(6, 12)}
"""Rows whose samples disagree (even samples answer "A", which pays 1); the others always answer "B"."""


class PaysForA:
    @hookimpl
    def compute_score(self, sample: Any) -> float:
        return float(sample.response.startswith("A"))


def _policy(request_id: str, _prompt: str) -> str:
    row, k = request_id.rsplit("#", 1)
    return "A" if row in VARIED and int(k) % 2 == 0 else "B"


def _trainer(tmp_path: Path, budget: int) -> Any:
    from rlfcore.backends.local.local import LocalTrainer
    from rlfcore.backends.local.model import ensure_model, load_policy, tool_schemas
    from rlfcore.backends.local.rundir import RunDir
    from rlfcore.testing import make_runtime

    rows = [{"id": f"r{i}", "prompt": f"Say something about {i}."} for i in range(12)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = {
        "plugins": ["pays"],
        "seed": 0,
        "model": {"path": "model", "init": {"texts": ["rows.jsonl"], **TINY_SIZES}},
        "rollout": {"n": 4, "max_turns": 1, "sampling": {"max_tokens": 4}},
        "trainer": {"steps": 1, "prompts_per_step": 4, "resample_zero_variance": budget, "checkpoint_every": 10},
        "engine": {"device": "cpu"},
    }
    runtime = make_runtime(config, {"pays": PaysForA()})
    model, hf_tok = load_policy(ensure_model(runtime.config, tmp_path, tool_schemas(runtime)), "cpu")
    run_dir = RunDir(tmp_path / f"run{budget}")
    trainer = LocalTrainer(runtime, model, hf_tok, [normalize_row(r, i) for i, r in enumerate(rows)], run_dir)
    trainer.rollout.engine = ScriptedEngine(trainer.tok, _policy)
    return trainer


def _step_rows(trainer: Any) -> list:
    from rlfcore.backends.local.local import row_order

    return [trainer.rows[i] for i in row_order(len(trainer.rows), 0, 0, 4)]


def _row_ids(trajectories: list) -> list[str]:
    return list(dict.fromkeys(t.row_id for t in trajectories))


@pytest.mark.parametrize("budget", [0, 1, 8])
def test_flat_groups_are_replaced_by_varied_fresh_ones_up_to_the_budget(tmp_path: Path, budget: int):
    trainer = _trainer(tmp_path, budget)
    rows = _step_rows(trainer)
    flat = [r.id for r in rows if r.id not in VARIED]
    assert [r.id for r in rows] == ["r1", "r2", "r11", "r0"]  # the seed's first step: 3 flat groups, 1 varied

    collected, _, _, resampled = asyncio.run(trainer._collect_dynamic(rows))
    ids = _row_ids(collected)
    assert len(ids) == 4 and len(collected) == 16  # the batch keeps its size: one group per prompt
    still_flat = [i for i in ids if i not in VARIED]
    if budget == 0:
        plain, _, _ = asyncio.run(trainer.collect(rows))
        assert resampled == 0 and ids == [r.id for r in rows]
        assert [(t.id, t.reward, t.response_ids) for t in collected] == [
            (t.id, t.reward, t.response_ids) for t in plain
        ]
    elif budget == 1:
        assert resampled == 1 and len(still_flat) in (2, 3)
    else:
        assert still_flat == [] and len(flat) <= resampled <= 8  # 8 rows are not in the step: enough varied ones
    assert ids[2] == "r11"  # a varied group keeps its place; flat ones are replaced where they stand
    assert [i for i in ids if i not in {r.id for r in rows}] == [i for i in ids if i in VARIED and i != "r11"]

    metrics = trainer.run()[0]
    trainer.run_dir.close()
    assert metrics["zero_variance_groups"] == len(still_flat) and metrics["resampled_groups"] == resampled
    logged = json.loads((tmp_path / f"run{budget}" / "metrics.jsonl").read_text().splitlines()[0])
    assert (logged["zero_variance_groups"], logged["resampled_groups"]) == (len(still_flat), resampled)
    assert metrics["active_fraction"] == (4 - len(still_flat)) / 4


def _zero_variance(run: Path) -> list[tuple[int, int]]:
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return [(m["zero_variance_groups"], m["resampled_groups"]) for m in metrics]


@pytest.mark.slow
def test_dynamic_sampling_on_the_calculator_trains_on_fewer_zero_variance_groups(tmp_path: Path):
    pytest.importorskip("rlf_mcp", reason="rlf-mcp is not installed (pip install -e plugins/rlf-mcp)")
    for name in ("run.yaml", "questions.jsonl", "demos.jsonl"):
        shutil.copy(ROOT / "examples" / "calculator" / name, tmp_path / name)
    small = ["model.init.hidden_size=64", "model.init.num_layers=2", "model.init.intermediate_size=128"]
    sft = run_rlf("sft", "run.yaml", "--run-dir", "sft", "sft.steps=150", *small, cwd=tmp_path, timeout=900)
    assert sft.returncode == 0, sft.stdout[-3000:] + sft.stderr[-3000:]
    model = "model.path=sft/checkpoints/sft/model"
    figures = {}
    for budget in (0, 64):
        out = run_rlf(
            "train",
            "run.yaml",
            model,
            "sft.steps=0",
            "trainer.steps=2",
            f"trainer.resample_zero_variance={budget}",
            "--run-dir",
            f"grpo{budget}",
            cwd=tmp_path,
            timeout=900,
        )
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        figures[budget] = _zero_variance(tmp_path / f"grpo{budget}")
    print(f"zero-variance groups of 8 per step, (flat, resampled): off {figures[0]}, budget 64 {figures[64]}")
    assert all(resampled == 0 for _, resampled in figures[0])
    assert sum(flat for flat, _ in figures[64]) < sum(flat for flat, _ in figures[0])
