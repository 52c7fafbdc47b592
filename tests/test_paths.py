"""One rule for paths: everything in a config is relative to the config file, in every command,
whatever the current folder (here: the config sits in a sub-folder of where the command runs)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.rlf import run_rlf


def _project(root: Path) -> Path:
    from rlfcore.tinymodel import build_tiny

    sub = root / "project"
    build_tiny(["What is 2 plus 3? The answer is 5."] * 10, sub / "model", vocab_size=280)
    (sub / "data.jsonl").write_text(json.dumps({"id": "q", "prompt": "What is 2 plus 3?", "ground_truth": "5"}) + "\n")
    (sub / "run.yaml").write_text(
        "model: {path: model}\ndata: {eval: data.jsonl}\nrollout: {sampling: {max_tokens: 4}}\nengine: {device: cpu}\n"
    )
    return sub / "run.yaml"


def test_eval_reads_model_and_data_relative_to_the_config(tmp_path):
    _project(tmp_path)
    out = run_rlf("eval", "project/run.yaml", "--out", "out.jsonl", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert json.loads((tmp_path / "out.jsonl").read_text())["row_id"] == "q"
    # a path typed on the command line is the shell's, and the error says so without the config's folder
    gone = run_rlf("eval", "project/run.yaml", "model.path=nowhere", cwd=tmp_path)
    assert gone.returncode == 2
    assert f"model.path: no folder {tmp_path / 'nowhere'} ('{tmp_path / 'nowhere'}')" in gone.stderr
    assert "huggingface" not in gone.stderr.lower() and "init-model" not in gone.stderr
    # one written in the file is the config's
    (tmp_path / "project" / "other.yaml").write_text("model: {path: nowhere}\ndata: {eval: data.jsonl}\n")
    written = run_rlf("eval", "project/other.yaml", cwd=tmp_path)
    assert written.returncode == 2
    assert (
        f"no folder {tmp_path / 'project' / 'nowhere'} ('nowhere', read relative to the config's folder"
        in written.stderr
    )


def test_config_reports_data_files_that_do_not_exist(tmp_path):
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "here.jsonl").write_text("{}\n")
    (tmp_path / "project" / "run.yaml").write_text(
        "data: {train: here.jsonl, eval: gone.jsonl}\nsft: {data: demos.jsonl}\n"
    )
    out = run_rlf("config", "project/run.yaml", cwd=tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "project/run.yaml: 2 errors" in out.stderr
    assert (
        f"data.eval: no such file: {tmp_path / 'project' / 'gone.jsonl'} (read relative to the config's folder)"
        in out.stderr
    )
    assert "sft.data: no such file" in out.stderr and "data.train" not in out.stderr
    # paths typed on the command line are read from the shell's folder, as in every CLI
    ok = run_rlf(
        "config", "project/run.yaml", "data.eval=project/here.jsonl", "sft.data=project/here.jsonl", cwd=tmp_path
    )
    assert ok.returncode == 0, ok.stderr
    here = tmp_path / "project" / "here.jsonl"
    assert f"warning: sft.data is set ({here}) but sft.steps is 0, so SFT is skipped" in ok.stderr
