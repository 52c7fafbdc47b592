"""The ``rlf`` command. Each command group lives in its own module; heavy imports stay inside commands.

Installed plugins add commands of their own (``register_commands``): ``rlf deepsearch prepare ...``.
They are asked only when a name is not a core command or the list is shown (``rlf --help``), so a core
command's run imports no plugin, and a plugin that fails leaves ``rlf`` whole: a warning names it.
"""

from __future__ import annotations

import sys
import traceback
from typing import Any

import click

from rlfcore import __version__, cpus
from rlfcore.cli.config import config
from rlfcore.cli.eval import eval_command
from rlfcore.cli.models import models
from rlfcore.cli.plugins import plugins
from rlfcore.cli.train import init_model, rescore, sft, train
from rlfcore.cli.ui import ui
from rlfcore.signals import handled, interruption

PLUGIN_COMMANDS = "rlf.plugin_commands"
"""Key of the installed plugins' commands in the root context's ``meta``: gathered once a run."""


class RlfGroup(click.Group):
    """The core commands, then the installed plugins' (asked for only when a name is not a core one)."""

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return self.commands.get(cmd_name) or plugin_commands(ctx).get(cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [*sorted(self.commands), *sorted(plugin_commands(ctx))]

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The help's command list, the plugins' apart: which commands come with rlf, which were added."""
        sections = [("Commands", dict(self.commands)), ("Plugin commands", plugin_commands(ctx))]
        width = max((len(name) for _, found in sections for name in found), default=0)
        for title, found in sections:
            rows = [
                (name, command.get_short_help_str(formatter.width - 6 - width))
                for name, command in sorted(found.items())
                if not command.hidden
            ]
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)


def plugin_commands(ctx: click.Context) -> dict[str, click.Command]:
    """The commands the installed plugins add, found once per ``rlf`` run; each problem is a warning."""
    meta: dict[str, Any] = ctx.find_root().meta
    if PLUGIN_COMMANDS not in meta:
        meta[PLUGIN_COMMANDS] = _gather_plugin_commands()
    found: dict[str, click.Command] = meta[PLUGIN_COMMANDS]
    return found


def _gather_plugin_commands() -> dict[str, click.Command]:
    from rlfcore.catalog import gather_commands
    from rlfcore.plugins import PluginError, PluginManager

    manager = PluginManager()
    try:
        manager.discover(builtins=False)
    except PluginError as exc:  # two plugins of one name: neither is trusted with a command
        _warn(str(exc))
        return {}
    manager.load_all()
    found = gather_commands(manager, cli.commands)
    for info in manager.infos.values():
        for problem in [info.error] if info.error else info.command_errors:
            _warn(problem)
    return found


def _warn(problem: str) -> None:
    click.secho(f"warning: {problem} (`rlf plugins list` shows each plugin's state)", fg="yellow", err=True)


@click.group(cls=RlfGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="rlf")
@click.option("--debug", is_flag=True, help="Show full tracebacks of plugin and config errors, and of failing tools.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """rlf: reinforcement-learning post-training for LLMs that call tools over many turns.

    Plugins add tools, tool-call formats and rewards; a YAML config enables them by name.
    """
    ctx.ensure_object(dict)["debug"] = debug
    if debug:
        from rlfcore.executor import show_tracebacks

        show_tracebacks()


cli.add_command(plugins)
cli.add_command(config)
cli.add_command(eval_command)
cli.add_command(models)
for command in (train, sft, rescore, init_model, ui):
    cli.add_command(command)


def main(argv: list[str] | None = None) -> None:
    """Entry point: runs the CLI and turns config and plugin errors into clean messages and exit codes."""
    cpus.apply()  # OpenMP's settings, before a command loads torch
    from rlfcore.config import ConfigError
    from rlfcore.failures import RunFailed
    from rlfcore.plugins import PluginError

    state: dict[str, bool] = {}  # the group's --debug, as click parsed it (absent before parsing ends)
    try:
        with handled():  # SIGTERM too unwinds the command, so its servers and workers are stopped
            code = cli.main(args=argv, prog_name="rlf", standalone_mode=False, obj=state)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except (click.Abort, KeyboardInterrupt) as exc:
        stop = interruption(exc)
        if stop is not None and stop.note:
            click.echo(stop.note, err=True)
        click.echo(f"Aborted ({stop.args[0]})." if stop is not None else "Aborted.", err=True)
        sys.exit(stop.exit_code if stop is not None else 130)
    except ConfigError as exc:
        click.secho(exc.render(), fg="red", err=True)
        sys.exit(2)
    except RunFailed as exc:
        click.secho(f"error: {exc}", fg="red", err=True)
        sys.exit(1)
    except PluginError as exc:
        click.secho(f"error: {exc}", fg="red", err=True)
        if state.get("debug") and exc.details:
            click.echo(exc.details, err=True)
        elif exc.details:
            click.echo("(run with --debug for the traceback)", err=True)
        sys.exit(1)
    except SystemExit:
        raise
    except Exception:
        if state.get("debug"):
            raise
        click.secho(f"error: {traceback.format_exc(limit=0).strip()}", fg="red", err=True)
        click.echo("(run with --debug for the traceback)", err=True)
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)
