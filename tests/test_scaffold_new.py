"""``rlf plugins new`` writes a plugin as the tutorial teaches: only rlfcore's public face (so the
plugins' import ban, ruff's TID251, holds for it), settings through ``ctx.settings_as``, and a ``test``
extra that brings the pytest its README runs."""

from __future__ import annotations

import importlib.util
import re

import pytest
from packaging.requirements import Requirement

from rlfcore.scaffold import write_plugin
from rlfcore.testing import rollout
from tests.support.docs import read_doc
from tests.support.public_api import KIT, rlfcore_imports, shipped_files

tomllib = pytest.importorskip("tomllib")


def test_the_scaffold_imports_only_the_public_api(tmp_path):
    plugin = write_plugin("greeter", tmp_path / "rlf-greeter")
    shipped = shipped_files(plugin)
    bad = []
    for path in plugin.rglob("*.py"):
        allowed = {"rlfcore": KIT["rlfcore"]} if path in shipped else KIT
        for line, module, names in rlfcore_imports(path):
            where = f"{path.relative_to(plugin)}:{line}"
            if module not in allowed:
                bad.append(f"{where}: imports from {module}")
            bad += [
                f"{where}: {module}.{n} is not public" for n in names if module in allowed and n not in allowed[module]
            ]
    assert not bad, "\n".join(bad)


def test_the_scaffold_reads_its_settings_without_an_isinstance_guard(tmp_path):
    plugin = write_plugin("greeter", tmp_path / "rlf-greeter")
    source = plugin / "rlf_greeter" / "plugin.py"
    assert "isinstance" not in source.read_text()
    spec = importlib.util.spec_from_file_location("scaffolded_greeter", source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    call = '<tool_call>{"name": "greet", "arguments": {"name": "Bob"}}</tool_call>'
    config = {"plugins": ["greeter"], "greeter": {"greeting": "Hi"}}
    row = {"id": "b", "prompt": "Greet Bob.", "ground_truth": "Hi, Bob!"}
    [traj] = rollout(config, [row], {"b": [call, "Hi, Bob!"]}, plugins={"greeter": module})
    assert traj.messages[2]["content"] == "Hi, Bob!"  # the configured greeting reached the tool
    assert traj.reward == 1.0


def test_the_readmes_install_brings_pytest(tmp_path):
    plugin = write_plugin("greeter", tmp_path / "rlf-greeter")
    project = tomllib.loads((plugin / "pyproject.toml").read_text())["project"]
    test_extra = {Requirement(r).name for r in project.get("optional-dependencies", {}).get("test", [])}
    assert "pytest" in test_extra, "the scaffold's `test` extra must install pytest"
    readme = (plugin / "README.md").read_text()
    [install] = re.findall(r"^pip install (.*?)(?:\s+#.*)?$", readme, re.MULTILINE)
    assert re.search(r"\[([^\]]*,)?test(,[^\]]*)?\]", install), f"the README installs {install!r}, without pytest"
    assert re.search(r"^pytest\b", readme, re.MULTILINE)


def test_the_next_line_installs_the_test_extra_and_the_tutorial_prints_it(tmp_path, monkeypatch):
    """The command ``rlf plugins new`` prints installs the ``test`` extra (pytest), and the tutorial shows
    that very line."""
    from click.testing import CliRunner

    from rlfcore.cli import cli

    monkeypatch.chdir(tmp_path)
    out = CliRunner().invoke(cli, ["plugins", "new", "calc"], catch_exceptions=False).stdout
    [line] = [x for x in out.splitlines() if x.startswith("Next: ")]
    assert line == "Next: pip install -e 'rlf-calc[test]' && rlf plugins check calc && pytest rlf-calc"
    tutorial = read_doc("plugin-tutorial.md")
    assert f"\n{line}\n" in tutorial
