"""``register_commands``: installed plugins add ``rlf <name> ...`` commands, and none can break ``rlf``.

The hook is for installed plugins (an ``rlf`` entry point), as ``rlf`` starts without a config that
could name a local one. The in-process tests install plugins the cheap way pip would leave them: a
module and its ``.dist-info`` (METADATA, entry_points.txt) in a folder put on ``sys.path``, then run
``rlfcore.cli``'s ``cli`` with click's runner; ``RLF_PLUGINS`` keeps the environment's own plugins
out. The last tests run the venv's ``rlf`` on the repository's plugins, as a user does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from rlfcore.cli import cli

HELLO = """
    import click
    from rlfcore import hookimpl


    @click.group()
    def hello():
        '''Say hello.'''


    @hello.command()
    @click.option("--name", default="world")
    def greet(name):
        '''Greet NAME.'''
        click.echo(f"hello {name}")


    @hookimpl
    def register_commands():
        return {"hello": hello}
"""

CLASH = """
    import click
    from rlfcore import hookimpl


    @click.command()
    def other():
        '''Not the core's train, nor hello's hello.'''
        click.echo("clash ran")


    @hookimpl
    def register_commands():
        return {"train": other, "hello": other, "clash": other}
"""

RAISING = """
    from rlfcore import hookimpl


    @hookimpl
    def register_commands():
        raise RuntimeError("no commands today")
"""

WRONG = """
    from rlfcore import hookimpl


    @hookimpl
    def register_commands():
        return ["not", "a", "mapping"]
"""

BROKEN = """
    import module_that_does_not_exist  # noqa
"""

PLUGINS = {"hello": HELLO, "clash": CLASH, "raising": RAISING, "wrong": WRONG, "broken": BROKEN}


def install(folder: Path, name: str, code: str) -> str:
    """A plugin as pip leaves it: ``rlf_cmd_NAME.py`` and its dist-info with the ``rlf`` entry point."""
    module = f"rlf_cmd_{name}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{module}.py").write_text(textwrap.dedent(code))
    info = folder / f"{module}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: rlf-cmd-{name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[rlf]\n{name} = {module}\n")
    return module


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The plugins above, each in a folder of its own, in this order on ``sys.path`` (the order
    ``rlf`` finds them in: ``hello`` before ``clash``)."""
    modules = []
    for i, (name, code) in reversed(list(enumerate(PLUGINS.items()))):
        modules.append(install(tmp_path / f"site{i}", name, code))
        monkeypatch.syspath_prepend(str(tmp_path / f"site{i}"))
    monkeypatch.delenv("RLF_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    monkeypatch.setenv("RLF_PLUGINS", ",".join(PLUGINS))
    yield
    for module in modules:
        sys.modules.pop(module, None)


def rlf(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.mark.usefixtures("installed")
def test_a_plugin_command_runs_under_rlf():
    result = rlf("hello", "greet", "--name", "rlf")
    assert result.exit_code == 0, result.output
    assert result.stdout == "hello rlf\n"


@pytest.mark.usefixtures("installed")
def test_help_lists_plugin_commands_apart_and_warns_of_each_problem():
    result = rlf("--help")
    assert result.exit_code == 0, result.output
    core, plugins = result.stdout.split("Plugin commands:")
    assert "train" in core and "hello" not in core
    assert [line.split()[0] for line in plugins.strip().splitlines()] == ["clash", "hello"]
    err = result.stderr
    assert "plugin 'clash': command 'train' refused: `rlf train` is a core command" in err
    assert "plugin 'clash': command 'hello' refused: plugin 'hello' already adds `rlf hello`" in err
    assert "plugin 'raising': register_commands failed: RuntimeError: no commands today" in err
    assert "plugin 'wrong': register_commands returned ['not', 'a', 'mapping']" in err
    assert "plugin 'broken'" in err and "module_that_does_not_exist" in err


@pytest.mark.usefixtures("installed")
def test_a_refused_name_keeps_its_owner():
    assert rlf("hello", "greet").stdout == "hello world\n"  # hello's, not clash's
    assert rlf("clash").stdout == "clash ran\n"  # clash's name that nobody else takes is kept
    assert "Train with GRPO" in rlf("train", "--help").stdout  # the core's train


@pytest.mark.usefixtures("installed")
def test_core_commands_import_no_plugin():
    result = rlf("config", "--help")
    assert result.exit_code == 0 and not result.stderr
    assert not [m for m in sys.modules if m.startswith("rlf_cmd_")]


@pytest.mark.usefixtures("installed")
def test_an_unknown_command_is_still_clicks_error():
    result = CliRunner().invoke(cli, ["nosuch"])
    assert result.exit_code == 2 and "No such command 'nosuch'" in result.stderr


@pytest.mark.usefixtures("installed")
def test_plugins_list_shows_the_commands_and_why_any_is_missing():
    result = rlf("plugins", "list", "--json")
    assert result.exit_code == 0, result.output
    plugins = {p["name"]: p for p in json.loads(result.stdout)}
    assert plugins["hello"]["commands"] == ["hello"] and plugins["hello"]["command_errors"] == []
    assert plugins["clash"]["commands"] == ["clash"] and len(plugins["clash"]["command_errors"]) == 2
    assert plugins["raising"]["error"] is None  # its other hooks still run: only its commands are missing
    assert "RuntimeError: no commands today" in plugins["raising"]["command_errors"][0]
    assert "module_that_does_not_exist" in plugins["broken"]["error"]
    text = rlf("plugins", "list").stdout
    assert "commands: rlf hello" in text and "command error: plugin 'raising'" in text


# --- the repository's plugins, through the venv's rlf -----------------------------------------------

SCRIPTS = Path(sys.executable).parent


def run(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLF_")}
    path = SCRIPTS / script
    if not path.is_file():
        pytest.skip(f"{path} is missing: install the plugins (pip install -e plugins/...)")
    return subprocess.run([str(path), *args], capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.parametrize(
    ("name", "subcommands"),
    [("deepsearch", ["index", "prepare", "serve"]), ("code", ["prepare"]), ("nl2sql", ["demo", "prepare"])],
)
def test_the_plugins_commands_run_under_rlf_and_their_old_scripts(name, subcommands):
    pytest.importorskip(f"rlf_{name}")
    out = run("rlf", name, "--help")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"Usage: rlf {name} [OPTIONS] COMMAND")
    listed = out.stdout.split("Commands:")[1].split()
    assert all(c in listed for c in subcommands), out.stdout
    old = run(f"rlf-{name}", "--help")
    assert old.returncode == 0 and old.stdout.replace(f"rlf-{name}", f"rlf {name}") == out.stdout


@pytest.mark.parametrize("name", ["deepsearch", "code", "nl2sql"])
def test_the_old_script_is_the_same_group(name):
    plugin = pytest.importorskip(f"rlf_{name}.plugin")
    script = pytest.importorskip(f"rlf_{name}.cli")
    group = plugin.register_commands()[name]
    assert group is script.cli and isinstance(group, click.Group)
