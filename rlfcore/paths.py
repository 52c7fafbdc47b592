"""The one rule for paths in a config, for the core and every plugin: ``~`` expanded, an absolute
path as it is, a relative one under the config file's folder (the working folder for a config
built in code), whatever folder the command runs from."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def config_dir(config: Any) -> Path:
    """The folder a config's relative paths start from: that of ``config`` (a ``RunConfig``, or the
    config file's own path), resolved; the working folder when it has no file (or is ``None``)."""
    source = config if isinstance(config, (str, Path)) else getattr(config, "source", None)
    return Path(source).resolve().parent if source else Path.cwd()


def config_path(config: Any, value: str | Path) -> Path:
    """``value``, a path written in ``config`` (a plugin's settings included), as it is meant."""
    return resolve_path(value, config_dir(config))


def resolve_path(value: str | Path, base: Path) -> Path:
    """``value`` (``~`` expanded) if absolute, else ``base / value``."""
    p = Path(value).expanduser()
    return p if p.is_absolute() else base / p
