"""``rlf plugins``: list, check and create plugins."""

from __future__ import annotations

import json
from pathlib import Path

import click


@click.group()
def plugins() -> None:
    """List installed plugins, check one, or start a new one."""


@plugins.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array instead of a table.")
@click.option("--all", "show_all", is_flag=True, help="Include the built-in plugins.")
@click.option(
    "-c", "--config", "config_path", type=click.Path(dir_okay=False), help="Mark the plugins this config enables."
)
def list_plugins(as_json: bool, show_all: bool, config_path: str | None) -> None:
    """Show installed plugins: version, source, hooks, tools, parsers, commands, and errors of broken ones."""
    from rlfcore.catalog import describe, gather_commands
    from rlfcore.config import load_config
    from rlfcore.plugins import PluginError, PluginManager

    manager = PluginManager()
    manager.discover()
    config = None
    if config_path:
        try:
            config, _ = load_config(config_path, manager=manager)
        except PluginError as exc:  # still list everything; the broken plugin shows its error
            click.secho(f"error: {exc}", fg="red", err=True)
    infos = [i for i in describe(manager, config) if show_all or i.source != "builtin"]
    root = click.get_current_context().find_root().command  # `rlf`, whose core names plugins may not take
    gather_commands(manager, getattr(root, "commands", {}))  # what `rlf --help` adds, and why any is left out
    if as_json:
        click.echo(json.dumps([i.as_dict() for i in infos], indent=2))
        return
    if not infos:
        click.echo("No plugins installed. `pip install rlf-<name>`, or `rlf plugins new NAME` to write one.")
        return
    for i in infos:
        where = i.distribution or i.source
        state = "broken" if i.error else ("enabled" if i.enabled else "installed")
        click.secho(
            f"{i.name} {i.version or ''} ({where}) {state}".replace("  ", " "), bold=True, fg="red" if i.error else None
        )
        if i.error:
            click.secho(f"  error: {i.error}", fg="red")
            continue
        click.echo(f"  hooks: {', '.join(i.hooks) or '-'}")
        if i.tools:
            click.echo(f"  tools: {', '.join(i.tools)}")
        if i.parsers:
            click.echo(f"  parsers: {', '.join(i.parsers)}")
        if i.commands:
            click.echo(f"  commands: {', '.join(f'rlf {c}' for c in i.commands)}")
        for problem in i.command_errors:
            click.secho(f"  command error: {problem}", fg="red")


@plugins.command("check")
@click.argument("name")
def check_plugin(name: str) -> None:
    """Check that plugin NAME conforms: it loads, its hooks match, its config validates, a smoke rollout runs.

    NAME is an installed plugin's name, or a local plugin as ``module:attr`` or a ``.py`` path.
    """
    from rlfcore.conformance import check

    report = check(name)
    click.echo(report.render())
    if not report.ok:
        raise SystemExit(1)


@plugins.command("new")
@click.argument("name")
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False),
    default=None,
    help="Where to write it (default: ./rlf-NAME).",
)
def new_plugin(name: str, directory: str | None) -> None:
    """Write a new plugin distribution NAME: pyproject, package, a tool, a reward, a test, a README."""
    from rlfcore.scaffold import write_plugin

    try:
        target = write_plugin(name, Path(directory) if directory else None)
    except (ValueError, FileExistsError) as exc:
        raise click.UsageError(str(exc)) from None
    click.echo(f"Wrote plugin '{name}' to {target}")
    click.echo(f"Next: pip install -e '{target}[test]' && rlf plugins check {name} && pytest {target}")
