"""The one rule for paths in a config, for the core and every plugin: ``~`` expanded, an absolute
path as it is, a relative one under the config file's folder (the working folder for a config
built in code), whatever folder the command runs from.

A run folder's ``config.yaml`` is a copy, saved elsewhere: its first line names the config file it
was read from (:data:`SOURCE_MARK`), so its relative paths keep meaning what they meant there.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SOURCE_MARK = "# rlf-source: "
"""How a saved config's first line starts; the rest is the original file's absolute path, in JSON."""


def source_header(source: Path) -> str:
    """The first lines of a config saved away from ``source``: where its relative paths start."""
    return (
        f"{SOURCE_MARK}{json.dumps(str(source.resolve()))}\n"
        "# (relative paths below are read from that file's folder; its own settings are not read again)\n"
    )


def recorded_source(text: str) -> Path | None:
    """The original config file a saved config's header names (:func:`source_header`), else ``None``."""
    first = text.split("\n", 1)[0]
    if not first.startswith(SOURCE_MARK):
        return None
    try:
        value = json.loads(first[len(SOURCE_MARK) :])
    except ValueError:
        return None
    return Path(value) if isinstance(value, str) and value else None


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


def in_hub_cache(name: str) -> bool:
    """Whether ``name`` is a hub id (``org/model``) whose files are in the local cache."""
    if name.startswith((".", "/", "~")) or name.count("/") != 1:
        return False
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return False
    return isinstance(try_to_load_from_cache(name, "tokenizer_config.json"), str)
