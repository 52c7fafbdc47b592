"""Bad data and settings fail early and name what is wrong: the file and line of undecodable rows,
the setting of a missing model (before any MCP server starts), a local plugin that would take a core
section's place."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from rlfcore.config import ConfigError, load_config
from rlfcore.data import DataError, read_rows
from rlfcore.plugins import PluginManager
from tests.support.rlf import run_rlf


def _rows_file(tmp_path: Path, lines: list[bytes]) -> Path:
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def test_invalid_utf8_names_the_file_and_line(tmp_path):
    path = _rows_file(tmp_path, [b'{"id": "a", "prompt": "fine"}', b"", b'{"id": "b", "prompt": "caf\xe9"}'])
    with pytest.raises(DataError, match=rf"^{path}:3: not valid UTF-8 \(byte 0xe9 at column 27\)"):
        read_rows(path)


def test_a_lone_surrogate_escape_names_the_file_and_line(tmp_path):
    path = _rows_file(
        tmp_path, [b'{"id": "a", "prompt": "fine \\ud83d\\ude00"}', b'{"id": "b", "prompt": "x\\ud800y"}']
    )
    with pytest.raises(DataError, match=rf"^{path}:2: .*lone surrogate \(U\+D800\)"):
        read_rows(path)
    assert read_rows(path, limit=1)[0].prompt[0]["content"] == "fine \U0001f600"  # a pair is one character


STARTS = "import sys; open(sys.argv[1], 'w').close()"


def _mcp_project(tmp_path: Path, model: str | None) -> Path:
    (tmp_path / "data.jsonl").write_text(json.dumps({"id": "q", "prompt": "Hi."}) + "\n")
    model_line = f"model:\n  path: {model}\n" if model else ""
    (tmp_path / "run.yaml").write_text(
        f"plugins: [mcp]\n{model_line}data:\n  eval: data.jsonl\n  train: data.jsonl\n"
        f'mcp:\n  servers:\n    marker:\n      command: {sys.executable}\n      args: [-c, "{STARTS}", {tmp_path / "started"}]\n'
    )
    return tmp_path / "run.yaml"


@pytest.mark.parametrize("model, message", [(None, "model.path: not set"), ("./nowhere", "model.path: no folder")])
def test_rlf_eval_names_a_missing_model_before_starting_mcp_servers(tmp_path, model, message):
    config = _mcp_project(tmp_path, model)
    out = run_rlf("eval", str(config), "--out", str(tmp_path / "out.jsonl"), cwd=tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    assert message in out.stderr and "huggingface" not in out.stderr.lower(), out.stderr
    assert not (tmp_path / "started").exists(), "an MCP server was started before the model was checked"


def test_rlf_train_names_a_missing_model_before_starting_mcp_servers(tmp_path):
    from rlfcore.backends.local.run import train

    config, manager = load_config(_mcp_project(tmp_path, "nowhere"))
    with pytest.raises(ConfigError, match="model.path: .*nowhere.* has no model, and model.init is not set"):
        train(config, manager, tmp_path / "run")
    assert not (tmp_path / "started").exists()


@pytest.mark.parametrize("name", ["engine", "tools", "data"])
def test_a_local_plugin_named_like_a_core_section_is_refused(tmp_path, name):
    (tmp_path / f"{name}.py").write_text("from rlfcore import hookimpl\n")
    (tmp_path / "run.yaml").write_text(f"local_plugins: [{name}.py]\n{name}: {{}}\n")
    with pytest.raises(ConfigError, match=rf"local_plugins\[0\]: .*named '{name}', like the core section `{name}:`"):
        load_config(tmp_path / "run.yaml")
    with pytest.raises(Exception, match="like the core section"):
        PluginManager().register_object(name, object())
