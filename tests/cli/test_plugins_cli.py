"""Plugins as users meet them: written from scratch, pip-installed, listed, enabled by name, checked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import ROOT
from tests.support.rlf import install, run_rlf, write_dist

GOOD = """
    from pydantic import BaseModel
    from rlfcore import Score, SetupContext, Tool, hookimpl


    class Settings(BaseModel):
        offset: int = 0


    def add(a: int, b: int) -> str:
        return str(a + b)


    @hookimpl
    def register_config_schema():
        return Settings


    @hookimpl
    def register_tools(ctx: SetupContext):
        schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}
        return [Tool(name="add", description="Add two integers.", parameters=schema, fn=add)]


    @hookimpl
    def compute_score(sample):
        return Score(value=float(sample.response.strip() == str(sample.ground_truth)), components={"match": 1.0})
"""

BROKEN = """
    import module_that_does_not_exist  # noqa
"""

MISSPELT = """
    from rlfcore import hookimpl


    @hookimpl
    def parse_tool_call(text):
        return []
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """One folder with three plugin distributions installed by pip: a good one, a broken one, a misspelt one."""
    root = tmp_path_factory.mktemp("dists")
    site = root / "site"
    install(write_dist(root, "rlf-adder", "rlf_adder", GOOD, ep_name="adder"), site)
    install(write_dist(root, "rlf-broken", "rlf_broken", BROKEN, ep_name="broken"), site)
    install(write_dist(root, "rlf-typo", "rlf_typo", MISSPELT, ep_name="typo"), site)
    return site


def test_list_json_shows_installed_plugins_and_marks_the_broken_one(site):
    out = run_rlf("plugins", "list", "--json", site=site)
    assert out.returncode == 0, out.stderr
    plugins = {p["name"]: p for p in json.loads(out.stdout)}
    assert {"adder", "broken", "typo"} <= set(plugins)  # besides any plugins installed in this environment
    adder = plugins["adder"]
    assert adder["version"] == "1.2.3" and adder["distribution"] == "rlf-adder" and adder["source"] == "entrypoint"
    assert adder["hooks"] == ["compute_score", "register_config_schema", "register_tools"]
    assert adder["tools"] == ["add"] and adder["error"] is None and adder["enabled"] is False
    assert "module_that_does_not_exist" in plugins["broken"]["error"]
    assert "rlf-broken" in plugins["broken"]["error"]
    assert "parse_tool_call" in plugins["typo"]["error"] and "parse_tool_calls" in plugins["typo"]["error"]


def test_list_all_includes_builtins_and_config_marks_enabled(site, tmp_path):
    cfg = tmp_path / "run.yaml"
    cfg.write_text("plugins: [adder]\nadder:\n  offset: 2\n")
    out = run_rlf("plugins", "list", "--json", "--all", "-c", str(cfg), site=site)
    assert out.returncode == 0, out.stderr
    plugins = {p["name"]: p for p in json.loads(out.stdout)}
    assert plugins["adder"]["enabled"] is True and plugins["broken"]["enabled"] is False
    assert plugins["rlf.parsers"]["source"] == "builtin" and "hermes" in plugins["rlf.parsers"]["parsers"]


def test_list_table_is_readable(site):
    out = run_rlf("plugins", "list", site=site)
    assert out.returncode == 0
    assert "adder" in out.stdout and "module_that_does_not_exist" in out.stdout


def test_check_passes_for_a_plugin_written_from_scratch(site):
    out = run_rlf("plugins", "check", "adder", site=site)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "smoke rollout smoke-add" in out.stdout and "0 failed" in out.stdout


def test_enabling_a_broken_plugin_fails_with_one_clean_message(site, tmp_path):
    cfg = tmp_path / "run.yaml"
    cfg.write_text("plugins: [broken]\n")
    out = run_rlf("config", str(cfg), site=site)
    assert out.returncode == 1
    assert "plugin 'broken' (distribution rlf-broken 1.2.3) failed to load" in out.stderr
    assert "ModuleNotFoundError" in out.stderr and "Traceback" not in out.stderr
    debug = run_rlf("--debug", "config", str(cfg), site=site)
    assert debug.returncode == 1 and "Traceback" in debug.stderr


def test_misspelt_hook_is_an_error_naming_plugin_and_hook(site):
    out = run_rlf("plugins", "check", "typo", site=site)
    assert out.returncode == 1
    assert (
        "plugin 'typo' implements 'parse_tool_call', which is not an rlf hook (did you mean 'parse_tool_calls'?)"
        in out.stdout
    )


def test_check_unknown_plugin_names_the_installed_ones(site):
    out = run_rlf("plugins", "check", "adderr", site=site)
    assert out.returncode == 1 and "did you mean 'adder'?" in out.stdout


def test_two_plugins_with_one_name_is_an_error(tmp_path):
    site = tmp_path / "site"
    install(write_dist(tmp_path, "rlf-one", "rlf_one", "", ep_name="same"), site)
    install(write_dist(tmp_path, "rlf-two", "rlf_two", "", ep_name="same"), site)
    out = run_rlf("plugins", "list", site=site)
    assert out.returncode == 1
    assert "two plugins are named 'same'" in out.stderr


def test_environment_variables_choose_and_disable_plugins(site):
    chosen = run_rlf("plugins", "list", "--json", site=site, env={"RLF_PLUGINS": "adder"})
    assert [p["name"] for p in json.loads(chosen.stdout)] == ["adder"]
    off = run_rlf("plugins", "list", "--json", site=site, env={"RLF_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert json.loads(off.stdout) == []


def test_listing_imports_no_ml_package(site):
    code = (
        "import sys, json, io, contextlib\n"
        "from rlfcore.cli import cli\n"
        "buf = io.StringIO()\n"
        "with contextlib.redirect_stdout(buf):\n"
        "    cli.main(['plugins', 'list', '--json', '--all'], standalone_mode=False)\n"
        "heavy = [m for m in ('torch', 'transformers', 'ray', 'verl', 'vllm') if m in sys.modules]\n"
        "print(json.dumps(heavy))\n"
    )
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{ROOT}"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_new_plugin_installs_and_passes_its_check_and_tests_unchanged(tmp_path):
    made = run_rlf("plugins", "new", "greeter", "--dir", str(tmp_path / "rlf-greeter"))
    assert made.returncode == 0, made.stderr
    site = install(tmp_path / "rlf-greeter", tmp_path / "site")
    listed = json.loads(run_rlf("plugins", "list", "--json", site=site).stdout)
    [greeter] = [p for p in listed if p["name"] == "greeter"]
    assert greeter["tools"] == ["greet"] and greeter["distribution"] == "rlf-greeter"
    check = run_rlf("plugins", "check", "greeter", site=site)
    assert check.returncode == 0, check.stdout
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{ROOT}"}
    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path / "rlf-greeter")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=tmp_path / "rlf-greeter",
    )
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert "2 passed" in tests.stdout


def test_new_refuses_bad_names_and_non_empty_folders(tmp_path):
    bad = run_rlf("plugins", "new", "Bad Name", "--dir", str(tmp_path / "x"))
    assert bad.returncode != 0 and "plugin name" in bad.stderr
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "f").write_text("x")
    full = run_rlf("plugins", "new", "ok", "--dir", str(tmp_path / "full"))
    assert full.returncode != 0 and "not empty" in full.stderr
