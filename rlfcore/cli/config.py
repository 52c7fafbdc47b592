"""``rlf config``: validate a run config and print it resolved."""

from __future__ import annotations

import click
import yaml


@click.command("config")
@click.argument("config_path", metavar="CONFIG", type=click.Path(dir_okay=False))
@click.argument("overrides", nargs=-1, metavar="[dotted.key=value]...")
def config(config_path: str, overrides: tuple[str, ...]) -> None:
    """Validate CONFIG (with overrides) and print every setting, defaults filled in, secrets redacted.

    Paths in CONFIG are read from its folder, paths typed in overrides from the current one. All mistakes are reported at once with their dotted paths, data files that do not exist
    included; the exit code is then 2. Settings that make a run do less than it seems are warned.
    """
    from rlfcore.config import ConfigError, load_config, missing_files, typed_overrides
    from rlfcore.diagnostics import config_warnings

    cfg, _ = load_config(config_path, typed_overrides(overrides))
    issues = missing_files(cfg)
    if issues:
        raise ConfigError(issues, source=config_path)
    model = cfg.model.path
    if model and cfg.model.init is None and not cfg.path(model).exists():
        click.secho(
            f"warning: model.path: no folder {cfg.path(model)} and no model.init to build one there: "
            "local runs need one (a hub name is only for --backend verl)",
            fg="yellow",
            err=True,
        )
    for _, message in config_warnings(cfg, training=True):
        click.secho(f"warning: {message}", fg="yellow", err=True)
    click.echo(yaml.safe_dump(cfg.resolved(), sort_keys=False), nl=False)
