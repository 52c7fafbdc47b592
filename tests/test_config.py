"""The run config: typed, every mistake reported at once with its path, plugin sections by schema."""

from __future__ import annotations

import pytest
import yaml
from pydantic import BaseModel

from rlfcore import hookimpl
from rlfcore.config import ConfigError, load_config
from rlfcore.testing import make_manager
from tests.support.rlf import run_rlf


class SqlSettings(BaseModel):
    timeout_s: float = 5.0
    max_rows: int = 50


class SqlPlugin:
    @hookimpl
    def register_config_schema(self):
        return SqlSettings


def load(data, overrides=None):
    return load_config(data, overrides, manager=make_manager({"sql": SqlPlugin()}))


def test_defaults_and_plugin_section():
    cfg, _ = load({"plugins": ["sql"], "sql": {"max_rows": 7}})
    assert cfg.rollout.max_turns == 4 and cfg.settings("sql") == SqlSettings(max_rows=7)
    assert cfg.environments() == {"sql": ["sql"]}


def test_three_mistakes_are_reported_together_with_paths():
    bad = {
        "plugins": ["sql"],
        "rollout": {"max_turns": "three", "max_turn": 2},
        "sql": {"max_rows": -1.5},
    }
    with pytest.raises(ConfigError) as err:
        load(bad)
    paths = {i.path: i.message for i in err.value.issues}
    assert set(paths) == {"rollout.max_turns", "rollout.max_turn", "sql.max_rows"}
    assert "'three'" in paths["rollout.max_turns"] and "integer" in paths["rollout.max_turns"]
    assert "did you mean 'max_turns'" in paths["rollout.max_turn"]
    assert "-1.5" in paths["sql.max_rows"]
    assert err.value.render().startswith("config: 3 errors")


def test_unknown_plugin_and_disabled_section():
    with pytest.raises(ConfigError) as err:
        load({"plugins": ["sq"], "sql": {}, "trainer_typo": 1})
    paths = {i.path: i.message for i in err.value.issues}
    assert "no plugin named 'sq' is installed; did you mean 'sql'?" in paths["plugins[0]"]
    assert "not enabled" in paths["sql"]
    assert "neither a core setting nor an enabled plugin" in paths["trainer_typo"]


def test_overrides_are_typed_and_validated():
    cfg, _ = load({"plugins": ["sql"]}, ["rollout.max_turns=6", "sql.timeout_s=1.5", "rollout.sampling.temperature=0"])
    assert cfg.rollout.max_turns == 6 and cfg.settings("sql").timeout_s == 1.5
    assert cfg.rollout.sampling.temperature == 0.0
    with pytest.raises(ConfigError) as err:
        load({}, ["rollout.max_turns=lots", "novalue"])
    assert {i.path for i in err.value.issues} == {"rollout.max_turns", "novalue"}


def test_envs_must_name_enabled_plugins():
    with pytest.raises(ConfigError) as err:
        load({"plugins": ["sql"], "envs": {"db": ["sql", "other"]}, "data": {"default_env": "nope"}})
    assert {i.path for i in err.value.issues} == {"envs.db[1]", "data.default_env"}


def test_resolved_config_round_trips(tmp_path):
    cfg, _ = load({"plugins": ["sql"], "seed": 3})
    cfg.save(tmp_path / "resolved.yaml")
    saved = yaml.safe_load((tmp_path / "resolved.yaml").read_text())
    assert saved["seed"] == 3 and saved["sql"] == {"timeout_s": 5.0, "max_rows": 50}
    assert saved["rollout"]["parser"] == "hermes"


def test_cli_reports_all_errors_with_exit_code_2(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("rollout:\n  max_turns: three\n  n: 0\ntools:\n  timeout: 3\n")
    out = run_rlf("config", str(path), "seed=oops")
    assert out.returncode == 2
    for fragment in ("4 errors", "rollout.max_turns", "rollout.n", "tools.timeout", "did you mean 'timeout_s'", "seed"):
        assert fragment in out.stderr, out.stderr


def test_cli_yaml_syntax_and_missing_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("rollout: [unclosed\n")
    out = run_rlf("config", str(path))
    assert out.returncode == 2 and "line 2" in out.stderr
    missing = run_rlf("config", str(tmp_path / "none.yaml"))
    assert missing.returncode == 2 and "no such file" in missing.stderr


def test_cli_prints_resolved_config(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("seed: 5\n")
    out = run_rlf("config", str(path), "rollout.max_turns=2")
    assert out.returncode == 0, out.stderr
    resolved = yaml.safe_load(out.stdout)
    assert resolved["seed"] == 5 and resolved["rollout"]["max_turns"] == 2


def test_local_plugin_from_a_py_path_relative_to_the_config(tmp_path):
    (tmp_path / "myreward.py").write_text(
        "from rlfcore import hookimpl\n\n@hookimpl\ndef compute_score(sample):\n    return 0.5\n"
    )
    path = tmp_path / "run.yaml"
    path.write_text("local_plugins: [myreward.py]\n")
    cfg, manager = load_config(path, manager=make_manager())
    assert manager.infos["myreward"].enabled and "compute_score" in manager.infos["myreward"].hooks
    assert cfg.environments() == {"myreward": ["myreward"]}
