"""Plugins use rlfcore's public API only: every ``from rlfcore... import`` in a shipped plugin names
something in ``rlfcore.__all__``, imported from ``rlfcore`` itself, and their tests and benchmarks add
only the test kit (``rlfcore.testing``) and the ``rlf`` command (``rlfcore.cli.cli``), so the core's
modules can move (as ``rlfcore.trainer`` became ``rlfcore.backends.local``) without breaking a plugin.
Ruff's TID251 holds them to it as they are written; these tests check the names and that the ban
covers every module. And one rule for "relative to the config", which the plugins' helpers share."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import rlfcore
import rlfcore.testing
from tests.support import ROOT
from tests.support.public_api import KIT, plugin_files, rlfcore_imports, shipped_files

PLUGINS = sorted((ROOT / "plugins").glob("rlf-*"))

EXCEPTION = "# noqa: TID251"
"""Marks, with a comment saying why, an internal import a plugin's test cannot do without."""


def test_there_are_plugins_to_check():
    assert len(PLUGINS) >= 4 and all(shipped_files(p) for p in PLUGINS)


@pytest.mark.parametrize("plugin", PLUGINS, ids=lambda p: p.name)
def test_shipped_plugin_code_imports_only_the_public_api(plugin):
    public = set(rlfcore.__all__)
    bad = []
    for path in shipped_files(plugin):
        for line, module, names in rlfcore_imports(path):
            where = f"{path.relative_to(ROOT)}:{line}"
            if module != "rlfcore":
                bad.append(f"{where}: imports from {module}; use `from rlfcore import ...`")
            bad += [f"{where}: rlfcore.{n} is not in rlfcore.__all__" for n in names if n not in public]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("plugin", PLUGINS, ids=lambda p: p.name)
def test_plugin_tests_import_only_the_public_api_and_the_test_kit(plugin):
    bad = []
    shipped = set(shipped_files(plugin))
    for path in [p for p in plugin_files(plugin) if p not in shipped]:
        source = path.read_text().splitlines()
        for line, module, names in rlfcore_imports(path):
            if EXCEPTION in source[line - 1]:
                continue
            where = f"{path.relative_to(ROOT)}:{line}"
            if module not in KIT:
                bad.append(f"{where}: imports from {module}; use rlfcore or rlfcore.testing")
            bad += [f"{where}: {module}.{n} is not public" for n in names if module in KIT and n not in KIT[module]]
    assert not bad, "\n".join(bad)


def test_the_lint_rule_bans_every_internal_module_for_plugins():
    """A new module of rlfcore is internal until it is named public here: ruff must ban it too."""
    tomllib = pytest.importorskip("tomllib")
    ruff = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["lint"]
    banned = set(ruff["flake8-tidy-imports"]["banned-api"])
    package = ROOT / "rlfcore"
    modules = {
        f"rlfcore.{'.'.join(p.relative_to(package).with_suffix('').parts)}".removesuffix(".__init__")
        for p in package.rglob("*.py")
    }
    public = set(KIT) - {"rlfcore"}
    internal = {m for m in modules - public if m.count(".") == 1 or m.rpartition(".")[0] in public}
    assert internal - banned == set(), "add these to banned-api in pyproject.toml"
    assert banned - modules == set(), "banned-api names modules that do not exist"
    assert "TID251" in ruff["select"] and ruff["per-file-ignores"]["!plugins/**"] == ["TID251"]


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
