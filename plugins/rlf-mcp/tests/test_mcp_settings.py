"""The ``mcp:`` section: the standard mcpServers format, inline or from a file, with clear errors."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from rlf_mcp.settings import McpConfigError, McpSettings, configured_servers

from rlfcore import ConfigError
from rlfcore.testing import load_config, make_manager


def servers(section: dict, base: Path = Path("/base")) -> dict:
    return {e.spec.name: e for e in configured_servers(McpSettings.model_validate(section), base)}


def test_no_servers_means_the_bundled_calculator_and_an_empty_mapping_means_none():
    [calc] = servers({}).values()
    assert calc.spec.name == "calculator" and calc.spec.transport == "stdio"
    assert calc.spec.command == sys.executable and calc.spec.args == ("-m", "rlf_mcp.servers.calculator")
    assert servers({"servers": {}}) == {}


def test_claude_desktop_entries_with_the_wrapper_key_kept():
    section = {
        "servers": {
            "mcpServers": {
                "fs": {"command": "npx", "args": ["-y", "server-fs", "/tmp"], "env": {"A": "1"}, "autoApprove": []},
                "off": {"command": "x", "disabled": True},
            }
        }
    }
    found = servers(section)
    assert list(found) == ["fs"]  # disabled servers are skipped; client-specific keys are ignored
    assert found["fs"].spec.args == ("-y", "server-fs", "/tmp") and found["fs"].spec.env == (("A", "1"),)


@pytest.mark.parametrize(
    ("entry", "transport"),
    [
        ({"url": "http://127.0.0.1:9/mcp"}, "streamable-http"),
        ({"url": "http://127.0.0.1:9/sse"}, "sse"),
        ({"url": "http://127.0.0.1:9/x", "type": "sse"}, "sse"),
        ({"url": "http://127.0.0.1:9/sse", "type": "streamable-http"}, "streamable-http"),
        ({"url": "http://127.0.0.1:9/x", "transport": "http"}, "streamable-http"),
        ({"command": "srv", "type": "stdio"}, "stdio"),
    ],
)
def test_transport_from_type_transport_or_url(entry, transport):
    assert servers({"servers": {"s": entry}})["s"].spec.transport == transport


def test_variables_expand_and_relative_cwd_resolves_against_the_config_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("MCP_TOKEN", "s3cret")
    section = {
        "servers": {
            "r": {"url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": "Bearer ${MCP_TOKEN}"}},
            "l": {"command": "srv", "args": ["--level", "${MCP_LEVEL:-info}"], "cwd": "work"},
        }
    }
    found = servers(section, tmp_path)
    assert found["r"].spec.headers == (("Authorization", "Bearer s3cret"),)
    assert found["l"].spec.args == ("--level", "info")
    assert found["l"].spec.cwd == str((tmp_path / "work").resolve())


def test_a_missing_variable_names_the_server_and_field(monkeypatch):
    monkeypatch.delenv("MCP_NOPE", raising=False)
    with pytest.raises(
        McpConfigError, match=r"server 'r' \(mcp.servers\), field 'headers.X': environment variable MCP_NOPE"
    ):
        servers({"servers": {"r": {"url": "http://127.0.0.1:9/mcp", "headers": {"X": "${MCP_NOPE}"}}}})


def test_config_file_relative_to_the_run_config_and_merged_with_inline_servers(tmp_path):
    (tmp_path / "mcp.json").write_text(json.dumps({"mcpServers": {"a": {"command": "srv-a", "cwd": "."}}}))
    found = servers({"config_file": "mcp.json", "servers": {"b": {"command": "srv-b"}}}, tmp_path)
    assert sorted(found) == ["a", "b"]
    assert found["a"].spec.cwd == str(tmp_path.resolve())  # relative to the JSON file's folder


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "mcp.config_file: no such file"),
        ("{not json", "not valid JSON: line 1, column 2"),
        ('{"servers": {}}', 'expected an object with an "mcpServers" object inside'),
        ('{"mcpServers": {"calc": {"command": "x", "args": "-m c"}}}', "server 'calc', field 'args': Input should be"),
        ('{"mcpServers": {"calc": {"comand": "x"}}}', "server 'calc', field 'comand': Extra inputs are not permitted"),
        ('{"mcpServers": {"b": {"command": "x"}}}', "server 'b' is defined both in mcp.servers and in"),
    ],
)
def test_config_file_errors_name_the_file_server_and_field(tmp_path, content, message):
    if content is not None:
        (tmp_path / "mcp.json").write_text(content)
    with pytest.raises(McpConfigError, match=re.escape(message)):
        servers({"config_file": "mcp.json", "servers": {"b": {"command": "y"}}}, tmp_path)


def test_inline_mistakes_are_reported_by_rlf_config_with_their_dotted_path():
    config = {
        "plugins": ["mcp"],
        "mcp": {
            "servers": {
                "both": {"command": "x", "url": "http://127.0.0.1:9/mcp"},
                "odd": {"url": "http://127.0.0.1:9/mcp", "type": "websocket"},
                "wrong": {"command": "x", "type": "sse"},
            },
            "call_timeout_s": 0,
        },
    }
    with pytest.raises(ConfigError) as info:
        load_config(config, manager=make_manager())
    text = info.value.render()
    assert "mcp.servers.both" in text and "either `command`" in text
    assert "mcp.servers.odd" in text and "unknown type 'websocket'" in text
    assert "mcp.servers.wrong" in text and "type 'sse' needs a `url`" in text
    assert "mcp.call_timeout_s" in text
