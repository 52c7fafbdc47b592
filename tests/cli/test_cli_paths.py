"""A path typed on the command line means what the user typed (issue 33, item 1): an override's
relative path is read from the current folder, as in every CLI, while a path written in the config
file stays relative to that file. Here the config sits in ``project/`` below where commands run."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from rlfcore.backends.local.run import check_model
from rlfcore.config import ConfigError, load_config, plugin_path_settings, typed_overrides
from tests.support.rlf import run_rlf

ROW = {"id": "q", "prompt": "What is 2 plus 3?", "ground_truth": "5"}


def _project(root: Path) -> Path:
    sub = root / "project"
    sub.mkdir()
    (sub / "data.jsonl").write_text(json.dumps(ROW) + "\n")
    (sub / "run.yaml").write_text(
        "model:\n  path: model\n  init: {texts: [data.jsonl], vocab_size: 280, hidden_size: 16, num_layers: 1, "
        "num_heads: 2, num_kv_heads: 1, intermediate_size: 32}\ndata: {train: data.jsonl}\n"
    )
    return sub / "run.yaml"


def test_rlf_config_reads_a_typed_path_from_the_current_folder_and_the_files_from_the_config(tmp_path):
    _project(tmp_path)
    (tmp_path / "mine.jsonl").write_text(json.dumps(ROW) + "\n")  # beside where the command runs, not the config
    out = run_rlf("config", "project/run.yaml", "data.eval=mine.jsonl", "sft.data=./mine.jsonl", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    shown = yaml.safe_load(out.stdout)
    assert (shown["data"]["train"], shown["data"]["eval"]) == ("data.jsonl", str(tmp_path / "mine.jsonl"))
    assert shown["sft"]["data"] == str(tmp_path / "mine.jsonl")

    gone = run_rlf("config", "project/run.yaml", "data.eval=gone.jsonl", cwd=tmp_path)
    assert gone.returncode == 2
    assert f"data.eval: no such file: {tmp_path / 'gone.jsonl'}\n" in gone.stderr  # where it was typed


def test_a_typed_difficulty_file_is_the_shells_as_rlf_eval_writes_it(tmp_path):
    """``rlf eval --difficulty runs/q.jsonl`` writes from the current folder; data.difficulty typed after
    it reads from there too, and a missing one is an error naming where it was looked for."""
    _project(tmp_path)
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "q.jsonl").write_text(json.dumps({"id": "q", "solve_rate": 0.5}) + "\n")
    drop = "data.drop_solved_at_least=1"
    out = run_rlf("config", "project/run.yaml", "data.difficulty=runs/q.jsonl", drop, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert yaml.safe_load(out.stdout)["data"]["difficulty"] == str(tmp_path / "runs" / "q.jsonl")
    gone = run_rlf("config", "project/run.yaml", "data.difficulty=runs/gone.jsonl", drop, cwd=tmp_path)
    assert gone.returncode == 2
    assert f"data.difficulty: no such file: {tmp_path / 'runs' / 'gone.jsonl'}\n" in gone.stderr


@pytest.mark.slow
def test_rlf_init_model_builds_at_a_typed_model_path_under_the_current_folder(tmp_path):
    _project(tmp_path)
    out = run_rlf("init-model", "project/run.yaml", "model.path=built", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert (tmp_path / "built" / "config.json").is_file() and not (tmp_path / "project" / "built").exists()


def test_typed_overrides_make_paths_absolute_and_leave_everything_else(tmp_path):
    (tmp_path / "runs").mkdir()
    given = [
        "model.path=runs/x/checkpoints/step_000120/model",
        "model.tokenizer=Qwen/Qwen3-0.6B",  # a hub id: no Qwen/ folder here
        "data={train: a.jsonl, eval: /abs/b.jsonl}",
        "local_plugins=[my.module:Plugin, tools/extra.py]",
        "agent.entry=agent.py:run",
        "model.init.texts=[../up.jsonl]",
        "data.eval=~/rows.jsonl",
        "trainer.steps=3",
        "sft.data=/already/absolute.jsonl",
        "data.difficulty=runs/q.difficulty.jsonl",
    ]
    typed = dict(item.split("=", 1) for item in typed_overrides(given, tmp_path))
    values = {key: yaml.safe_load(value) for key, value in typed.items()}
    assert values["model.path"] == str(tmp_path / "runs/x/checkpoints/step_000120/model")
    assert values["model.tokenizer"] == "Qwen/Qwen3-0.6B"
    assert values["data"] == {"train": str(tmp_path / "a.jsonl"), "eval": "/abs/b.jsonl"}
    assert values["local_plugins"] == ["my.module:Plugin", str(tmp_path / "tools/extra.py")]
    assert values["agent.entry"] == f"{tmp_path / 'agent.py'}:run"
    assert values["model.init.texts"] == [str(tmp_path.parent / "up.jsonl")]
    assert values["data.eval"] == os.path.expanduser("~/rows.jsonl")
    assert values["data.difficulty"] == str(tmp_path / "runs/q.difficulty.jsonl")
    assert typed["trainer.steps"] == "3" and typed["sft.data"] == "/already/absolute.jsonl"  # as given


def test_a_missing_model_folder_says_where_it_was_looked_for(tmp_path):
    config = _project(tmp_path)
    no_init = ["model.init=null"]
    from_file, _ = load_config(config, no_init)
    with pytest.raises(ConfigError) as caught:
        check_model(from_file, from_file.base_dir)
    assert str(caught.value).endswith(
        f"model.path: {tmp_path / 'project' / 'model'} has no model, and model.init is not set to build one "
        "(read relative to the config's folder; one typed on the command line is not)"
    )
    typed, _ = load_config(config, typed_overrides(["model.path=runs/x/model", *no_init], tmp_path))
    with pytest.raises(ConfigError) as caught:
        check_model(typed, typed.base_dir)
    assert str(caught.value).endswith(
        f"model.path: {tmp_path / 'runs/x/model'} has no model, and model.init is not set to build one"
    )


def test_a_plugins_path_setting_typed_on_the_command_line_is_the_shells(tmp_path):
    """nl2sql types ``db`` and ``db_root`` ``Path``: typed as overrides they are read from the current
    folder, as the core's are, and written in the file they stay the config's."""
    pytest.importorskip("rlf_nl2sql", reason="rlf-nl2sql is not installed (pip install -e plugins/rlf-nl2sql)")
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "run.yaml").write_text("plugins: [nl2sql]\nnl2sql: {db_root: dbs, db: mine.sqlite}\n")
    out = run_rlf("config", "project/run.yaml", "nl2sql.db=dbs/x.sqlite", "nl2sql.max_rows=7", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    shown = yaml.safe_load(out.stdout)["nl2sql"]
    assert (shown["db"], shown["db_root"], shown["max_rows"]) == (str(tmp_path / "dbs" / "x.sqlite"), "dbs", 7)

    whole = run_rlf("config", "project/run.yaml", "nl2sql={db_root: ../shared, max_rows: 3}", cwd=tmp_path)
    assert whole.returncode == 0, whole.stderr
    assert yaml.safe_load(whole.stdout)["nl2sql"]["db_root"] == str(tmp_path.parent / "shared")


def test_plugin_path_settings_are_the_fields_typed_path(tmp_path):
    """deepsearch's corpus and index folder are paths, its encoder (a folder or a package) and the rest
    are not; a name that is no installed plugin has none, and its override is left as typed."""
    pytest.importorskip("rlf_deepsearch", reason="rlf-deepsearch is not installed")
    assert set(plugin_path_settings(["deepsearch", "nosuch"])) == {"deepsearch.corpus", "deepsearch.index_dir"}
    given = ["deepsearch.corpus=data/c.jsonl", "deepsearch.encoder=enc", "deepsearch.index_dir=~/idx", "nosuch.x=a"]
    assert typed_overrides(given, tmp_path) == [
        f"deepsearch.corpus={json.dumps(str(tmp_path / 'data' / 'c.jsonl'))}",
        "deepsearch.encoder=enc",
        f"deepsearch.index_dir={json.dumps(os.path.expanduser('~/idx'))}",
        "nosuch.x=a",
    ]
