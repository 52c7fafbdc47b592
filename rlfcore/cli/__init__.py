"""The ``rlf`` command. Each command group lives in its own module; heavy imports stay inside commands."""

from __future__ import annotations

import sys
import traceback

import click

from rlfcore import __version__
from rlfcore.cli.config import config
from rlfcore.cli.eval import eval_command
from rlfcore.cli.models import models
from rlfcore.cli.plugins import plugins
from rlfcore.cli.train import init_model, rescore, sft, train
from rlfcore.cli.ui import ui
from rlfcore.signals import handled, interruption


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
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
