"""What a request to ``rlf ui`` may name: files inside the UI's root folders, and override keys from an
allow-list.

A request's parameters come from whoever can reach the UI, so none of them may choose a command, a
plugin, a Python file or a path outside the folders the user served. The allow-list names settings that
only tune a run (steps, rates, sampling, limits); everything else is refused with the key named.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from rlfcore.config import PATH_SETTINGS
from rlfcore.paths import config_dir, recorded_source

# Settings a launch or preview may override: whole sections of numbers and switches, and single keys.
ALLOWED_OVERRIDES: tuple[str, ...] = (
    "seed",
    "trainer.",
    "sft.",
    "rollout.",
    "tools.",
    "reward.",
    "engine.max_batch_size",
    "engine.threads",
    "engine.timeout_s",
    "engine.device",
    "model.dtype",
    "data.default_env",
)
# Keys that name a file (every path the core reads, so a new one is refused too) or send data elsewhere.
REFUSED_OVERRIDES: tuple[str, ...] = (*PATH_SETTINGS, "trainer.loggers", "trainer.project")


class Refused(ValueError):
    """A request named something the UI does not allow; the message says what and why."""


def _listed(key: str) -> bool:
    return any(key.startswith(a) if a.endswith(".") else key == a for a in ALLOWED_OVERRIDES)


def override_allowed(key: str) -> bool:
    """Whether the dotted ``key`` may be overridden from the UI."""
    if any(key == r or key.startswith(r + ".") for r in REFUSED_OVERRIDES):
        return False
    return _listed(key)


def check_overrides(overrides: Iterable[str]) -> list[str]:
    """The overrides unchanged, or :class:`Refused` naming every key outside the allow-list."""
    given = list(overrides)
    bad = [o.partition("=")[0].strip() or o for o in given if not override_allowed(o.partition("=")[0].strip())]
    if bad:
        raise Refused(
            f"override{'s' if len(bad) > 1 else ''} not allowed from the UI: {', '.join(bad)}. "
            f"The UI may set {', '.join(a + '*' if a.endswith('.') else a for a in ALLOWED_OVERRIDES)} "
            f"(not {', '.join(r for r in REFUSED_OVERRIDES if _listed(r))}); run other changes from a shell."
        )
    return given


def config_base(text: str, source: Path) -> Path:
    """The folder ``load_config`` reads the relative paths of ``text``, read as the file ``source``, from:
    that of the file a run's saved copy names in its header, else that of ``source``."""
    return config_dir(recorded_source(text) or source)


def local_plugins(text: str) -> list[Any]:
    """The ``local_plugins`` entries of a config's YAML text, as ``load_config`` finds them (none when
    the text is no mapping or not YAML: loading it then imports nothing)."""
    try:
        data: Any = yaml.safe_load(text)
    except yaml.YAMLError:
        return []
    entries = data.get("local_plugins") if isinstance(data, dict) else None
    return entries if isinstance(entries, list) else []


def plugin_file(spec: str) -> str | None:
    """The ``.py`` file a ``local_plugins`` entry names, read as ``PluginManager.add_local`` reads it
    (``a.py``, ``a.py:attr``); ``None`` for a module name, which Python imports from ``sys.path``."""
    module_part = spec if spec.endswith(".py") else spec.partition(":")[0]
    return module_part if module_part.endswith(".py") else None


def refuse_local_plugins(text: str) -> None:
    """:class:`Refused` when a config names local plugins, which a read-only UI does not import."""
    if local_plugins(text):
        raise Refused(
            "read-only: this UI imports no local plugins and starts no plugin servers, and this config names "
            "local_plugins; check it from a shell (rlf config CONFIG, rlf plugins list --config CONFIG)"
        )


class Roots:
    """The folders whose files the UI may read and launch from: the runs folder, the ``--config`` file's
    folder and any ``--root`` given."""

    def __init__(self, folders: Iterable[Path]):
        self.folders: list[Path] = []
        for f in folders:
            resolved = Path(f).resolve()
            if resolved not in self.folders:
                self.folders.append(resolved)

    def holds(self, path: Path) -> bool:
        """Whether ``path`` (symlinks followed) lies inside one of the folders."""
        resolved = path.resolve()
        return any(resolved == f or resolved.is_relative_to(f) for f in self.folders)

    def file(self, raw: str | Path, base: Path) -> Path:
        """``raw`` (relative to ``base``) resolved, or :class:`Refused` when it lies outside every folder."""
        p = Path(raw).expanduser()
        path = (p if p.is_absolute() else base / p).resolve()
        if not self.holds(path):
            raise Refused(f"{path} is outside the folders this UI serves ({self.describe()}); add one with --root")
        return path

    def config(self, raw: str | Path, base: Path) -> Path:
        """A config file inside the folders whose ``local_plugins`` also lie inside them."""
        path = self.file(raw, base)
        if path.is_file():
            self.check_text(path.read_text(errors="replace"), path)
        return path

    def check_text(self, text: str, source: Path) -> None:
        """Refuse a config's YAML, read as the file ``source`` (which need not exist), whose
        ``local_plugins`` import code from outside the folders: a ``.py`` file elsewhere, counted from
        where ``load_config`` counts it (:func:`config_base`), or a module name, found on ``sys.path``."""
        base = config_base(text, source)
        for i, entry in enumerate(local_plugins(text)):
            if not isinstance(entry, str):
                continue  # validation reports it; loading imports nothing for it
            file = plugin_file(entry)
            if file is None:
                raise Refused(
                    f"local_plugins[{i}]: {entry!r} is a module name, imported from wherever Python finds it; "
                    f"the UI takes local plugins only as .py files inside the folders it serves "
                    f"({self.describe()}): name the file, or use this config from a shell"
                )
            try:
                self.file(file, base)
            except Refused as exc:
                raise Refused(f"local_plugins[{i}]: {exc}") from None

    def describe(self) -> str:
        return ", ".join(str(f) for f in self.folders)
