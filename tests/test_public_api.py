"""Plugins use rlfcore's public API only: every ``from rlfcore... import`` in a shipped plugin names
something in ``rlfcore.__all__``, imported from ``rlfcore`` itself, so the core's modules can move
(as ``rlfcore.trainer`` became ``rlfcore.backends.local``) without breaking a plugin. And one rule
for "relative to the config", which the plugins' helpers share."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import rlfcore

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = sorted((ROOT / "plugins").glob("rlf-*"))

HARNESS = {
    "rlfcore.testing",  # the documented test kit for plugin authors (docs/plugin-tutorial.md)
    "rlfcore.config",  # load_config, ToolsConfig, ConfigError: tests build configs as the CLI does
    "rlfcore.executor",  # tests and benchmarks drive the core's executor against the plugin's tools
    "rlfcore.tinymodel",  # tiny models built from the tests' own text (no hub)
    "rlfcore.data",
    "rlfcore.loop",
    "rlfcore.rewards",
    "rlfcore.chat",
    "rlfcore.cli",
    "rlfcore.types",
    "rlfcore.tools",
    "rlfcore.backends.local.model",
    "rlfcore.backends.local.local",
    "rlfcore.backends.local.rundir",
    "rlfcore.engines.scripted",  # scripted policies through the real loop
    "rlfcore.backends.verl.reward",  # the judge plugin's test of verl's reward router path
}
"""Modules a plugin's tests and benchmarks (not its shipped code) may reach into: they exercise the
core's own machinery around the plugin, as the core's tests do."""


def _imports(path: Path) -> list[tuple[int, str, list[str]]]:
    tree = ast.parse(path.read_text(), str(path))
    return [
        (node.lineno, node.module, [a.name for a in node.names])
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "rlfcore"
    ] + [
        (node.lineno, alias.name, [])
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
        if alias.name.startswith("rlfcore.")
    ]


def _shipped(plugin: Path) -> list[Path]:
    return [p for p in plugin.rglob("*.py") if p.parts[len(plugin.parts)] not in ("tests", "benchmarks")]


def test_there_are_plugins_to_check():
    assert len(PLUGINS) >= 4 and all(_shipped(p) for p in PLUGINS)


@pytest.mark.parametrize("plugin", PLUGINS, ids=lambda p: p.name)
def test_shipped_plugin_code_imports_only_the_public_api(plugin):
    public = set(rlfcore.__all__)
    bad = []
    for path in _shipped(plugin):
        for line, module, names in _imports(path):
            where = f"{path.relative_to(ROOT)}:{line}"
            if module != "rlfcore":
                bad.append(f"{where}: imports from {module}; use `from rlfcore import ...`")
            bad += [f"{where}: rlfcore.{n} is not in rlfcore.__all__" for n in names if n not in public]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("plugin", PLUGINS, ids=lambda p: p.name)
def test_plugin_tests_reach_only_into_the_harness_modules(plugin):
    public = set(rlfcore.__all__)
    bad = []
    for path in [p for p in plugin.rglob("*.py") if p not in _shipped(plugin)]:
        for line, module, names in _imports(path):
            if module == "rlfcore":
                bad += [f"{path.relative_to(ROOT)}:{line}: {n}" for n in names if n not in public]
            elif module not in HARNESS:
                bad.append(f"{path.relative_to(ROOT)}:{line}: {module}")
    assert not bad, "\n".join(bad)


def test_every_public_name_resolves_and_import_rlfcore_stays_light():
    code = (
        "import sys, rlfcore\n"
        "heavy = [m for m in ('torch', 'transformers', 'rlfcore.config', 'rlfcore.loop') if m in sys.modules]\n"
        "missing = [n for n in rlfcore.__all__ if getattr(rlfcore, n, None) is None]\n"
        "print(heavy, missing)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[] []", out.stdout + out.stderr


def test_relative_to_the_config_is_one_rule(tmp_path, monkeypatch):
    from rlfcore import config_dir, config_path
    from rlfcore.config import load_config

    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "run.yaml").write_text("seed: 1\n")
    monkeypatch.chdir(tmp_path)
    config, _ = load_config("project/run.yaml")
    here = (tmp_path / "project").resolve()
    assert config_dir(config) == here == config.base_dir == config_dir("project/run.yaml")
    assert config_path(config, "data/x.jsonl") == here / "data" / "x.jsonl" == config.path("data/x.jsonl")
    assert config_path(config, "/abs/x") == Path("/abs/x")
    assert config_path(config, "~/x") == Path.home() / "x"
    assert config_dir(None) == tmp_path and config_path(None, "x") == tmp_path / "x"  # a config built in code


def test_the_plugins_path_helpers_follow_the_core_rule(tmp_path, monkeypatch):
    """Each plugin's own "relative to the config" helper gives the core's answer."""
    from types import SimpleNamespace

    from rlf_deepsearch.settings import base_dir as deepsearch_dir
    from rlf_deepsearch.settings import resolve as deepsearch_resolve
    from rlf_judge_qwq.judge import _base_dir as judge_dir
    from rlf_mcp.plugin import _base_dir as mcp_dir
    from rlf_nl2sql.settings import base_dir as nl2sql_dir

    from rlfcore import config_dir, config_path
    from rlfcore.config import load_config

    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "run.yaml").write_text("seed: 1\n")
    monkeypatch.chdir(tmp_path)
    config, _ = load_config("p/run.yaml")  # a relative source: a helper must not answer with "p"
    ctx = SimpleNamespace(config=config)
    expected = config_dir(config)
    assert expected.is_absolute()
    assert deepsearch_dir(ctx) == judge_dir(config) == mcp_dir(ctx) == nl2sql_dir(config) == expected
    assert deepsearch_resolve("../c.jsonl", expected) == config_path(config, "../c.jsonl")
