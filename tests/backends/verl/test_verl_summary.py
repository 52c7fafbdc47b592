"""A verl run that ends well is finished in ``rlf ui``: ``rlf train --backend verl`` writes
``RUN/summary.json`` from verl's metrics, as the local backend does, and a run training again loses it.

verl's trainer itself is stood in for by its real ``FileLogger`` writing the run's metrics and an exit
code (the end-to-end test, tests/backends/verl/test_verl_e2e.py, runs the real trainer); everything else is
the verl backend as ``rlf train`` calls it, verl's config validation included."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

tracking = pytest.importorskip("verl.utils.tracking", reason="verl is not installed (pip install 'rlfcore[verl]')")

from rlfcore.backends import get_backend  # noqa: E402
from rlfcore.backends.base import TrainRequest  # noqa: E402
from rlfcore.backends.verl import launch  # noqa: E402
from rlfcore.rundata.metrics import read_metrics_from  # noqa: E402
from rlfcore.ui.runs import status  # noqa: E402


def _config(tmp: Path) -> Path:
    rows = [{"id": f"q{i}", "prompt": f"What is {i} plus 1?", "ground_truth": str(i + 1)} for i in range(4)]
    (tmp / "data.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (tmp / "run.yaml").write_text(
        "model: {path: Qwen/Qwen3-4B}\ndata: {train: data.jsonl}\n"
        "rollout: {n: 2, max_total_tokens: 512, max_response_tokens: 64}\n"
        "trainer: {steps: 3, prompts_per_step: 2, micro_batch_size: 2}\n"
    )
    return tmp / "run.yaml"


def _verl(steps: list[int], rc: int, monkeypatch: pytest.MonkeyPatch):
    """What verl's trainer leaves for rlf: its file logger's lines (at the path rlf set) and an exit code."""

    def run(plan: launch.Plan) -> int:
        path = launch.metrics_file(plan)
        assert path is not None
        monkeypatch.setenv("VERL_FILE_LOGGER_PATH", path)  # as rlf's Ray runtime env sets it for verl
        logger = tracking.FileLogger("rlf", "run")
        for step in steps:
            logger.log({"critic/score/mean": 0.1 * step, "timing_s/step": 2.0}, step=step)
        logger.finish()
        return rc

    return run


def test_a_verl_run_is_finished_when_it_ends_well_and_not_while_it_trains_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = tmp_path / "run"
    config = _config(tmp_path)
    monkeypatch.setattr(launch, "launch", _verl([1, 2, 3], 0, monkeypatch))
    verl = get_backend("verl")
    assert verl.run(verl.prepare(TrainRequest(str(config), run))).exit_code == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["backend"] == "verl" and summary["steps"] == 3 and summary["total_s"] > 0
    assert summary["reward_first_10pct"] == pytest.approx(0.1) and summary["reward_last_10pct"] == pytest.approx(0.3)
    assert status(run) == "finished"
    assert [r["step"] for r in read_metrics_from(run)[0]] == [1, 2, 3]
    # resumed from step 2's checkpoint, verl crashes in step 3: the run is no longer finished
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("2\n")
    monkeypatch.setattr(launch, "launch", _verl([], 1, monkeypatch))
    assert verl.resume(verl.prepare(TrainRequest(str(config), run, resume=True))).exit_code == 1
    assert not (run / "summary.json").exists() and status(run) != "finished"
    assert [r["step"] for r in read_metrics_from(run)[0]] == [1, 2]  # the kept steps' curves stay
