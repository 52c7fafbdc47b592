"""``rlf config``: validate a run config and print it resolved."""

from __future__ import annotations

import click
import yaml


@click.command("config")
@click.argument("config_path", metavar="CONFIG", type=click.Path(dir_okay=False))
@click.argument("overrides", nargs=-1, metavar="[dotted.key=value]...")
def config(config_path: str, overrides: tuple[str, ...]) -> None:
    """Validate CONFIG (with overrides) and print every setting, defaults filled in, secrets redacted.

    Paths in CONFIG are read from its folder, paths typed in overrides from the current one. All mistakes are
    reported at once with their dotted paths, data files that do not exist included, in the words `rlf train`
    and `rlf eval` use; the exit code is then 2. A model that is not there, and settings that make a run do
    less than it seems, are warned.
    """
    from rlfcore.config import ConfigIssue, typed_overrides, validate
    from rlfcore.diagnostics import config_warnings

    def warn(issue: ConfigIssue) -> None:
        click.secho(f"warning: {issue.path}: {issue.message}", fg="yellow", err=True)

    cfg, _ = validate(config_path, typed_overrides(overrides), "config", warn=warn)
    for _, message in config_warnings(cfg, training=True):
        click.secho(f"warning: {message}", fg="yellow", err=True)
    click.echo(yaml.safe_dump(cfg.resolved(), sort_keys=False), nl=False)
