"""``rlf eval`` on a config whose model ``model.init`` is to build (issue 33): it builds it at
``model.path`` as ``rlf train`` does, saying so, instead of refusing a folder that does not exist yet."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.rlf import run_rlf

ROWS = [{"id": f"q{i}", "prompt": f"What is {i} plus 3?", "ground_truth": str(i + 3)} for i in range(2)]


def _project(root: Path, init: str) -> Path:
    """A config with a tiny ``model.init`` and no model folder yet, in ``project/`` below where commands run."""
    sub = root / "project"
    sub.mkdir()
    (sub / "data.jsonl").write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    (sub / "run.yaml").write_text(
        f"model:\n  path: model\n  init: {init}\ndata: {{eval: data.jsonl}}\n"
        "rollout: {n: 1, sampling: {max_tokens: 4}}\nengine: {device: cpu}\n"
    )
    return sub / "run.yaml"


def test_rlf_eval_builds_the_model_that_model_init_describes(tmp_path):
    init = "{texts: [data.jsonl], vocab_size: 280, hidden_size: 16, num_layers: 1, num_heads: 2, num_kv_heads: 1}"
    _project(tmp_path, init)
    out = run_rlf("eval", "project/run.yaml", "--out", "out.jsonl", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    model = tmp_path / "project" / "model"
    assert (model / "config.json").is_file() and (model / "tokenizer.json").is_file()
    assert f"Building the model model.init describes at {model} (model.path holds none yet)" in out.stderr
    assert [json.loads(line)["row_id"] for line in (tmp_path / "out.jsonl").read_text().splitlines()] == ["q0", "q1"]

    again = run_rlf("eval", "project/run.yaml", "--out", "out.jsonl", cwd=tmp_path)  # built once: used as it is
    assert again.returncode == 0, again.stdout + again.stderr
    assert "Building the model" not in again.stderr


def test_rlf_eval_names_a_missing_model_init_text_before_it_starts(tmp_path):
    _project(tmp_path, "{texts: [data.jsonl, gone.jsonl], vocab_size: 280, hidden_size: 16}")
    out = run_rlf("eval", "project/run.yaml", "--out", "out.jsonl", cwd=tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    gone = tmp_path / "project" / "gone.jsonl"
    assert f"model.init.texts[1]: no such file: {gone} (read relative to the config's folder)" in out.stderr
    assert "model.path" not in out.stderr and not (tmp_path / "project" / "model").exists()


@pytest.mark.parametrize(
    ("overrides", "builds"),
    [
        ([], True),  # the local engine reads the weights
        (["engine.name=openai", "engine.base_url=http://127.0.0.1:9/v1"], True),  # its tokenizer is the model's
        (["engine.name=openai", "engine.base_url=http://127.0.0.1:9/v1", "model.tokenizer=tok"], False),
        (["engine.name=openai-chat", "engine.base_url=http://127.0.0.1:9/v1"], False),  # messages only
    ],
)
def test_rlf_eval_builds_the_model_only_when_it_reads_it(tmp_path, overrides, builds):
    """An API engine given its tokenizer reads nothing of ``model.path``: eval neither builds the model
    nor asks for ``model.init``'s files (nl2sql's GeoQuery example, evaluated through an endpoint)."""
    from rlfcore.config import builds_model, load_config

    config, _ = load_config(_project(tmp_path, "{texts: [data.jsonl]}"), overrides)
    assert builds_model(config, "eval") is builds
    assert builds_model(config, "train") is True
