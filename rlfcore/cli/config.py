"""``rlf config``: validate a run config and print it resolved."""

from __future__ import annotations

import click
import yaml


@click.command("config")
@click.argument("config_path", metavar="CONFIG", type=click.Path(dir_okay=False))
@click.argument("overrides", nargs=-1, metavar="[dotted.key=value]...")
def config(config_path: str, overrides: tuple[str, ...]) -> None:
    """Validate CONFIG (with overrides) and print every setting, defaults filled in.

    All mistakes are reported at once with their dotted paths; the exit code is then 2.
    """
    from rlfcore.config import load_config

    cfg, _ = load_config(config_path, list(overrides))
    click.echo(yaml.safe_dump(cfg.resolved(), sort_keys=False), nl=False)
