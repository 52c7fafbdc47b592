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
# Inside the sections above, the keys that name a file or send data elsewhere.
REFUSED_OVERRIDES: tuple[str, ...] = ("sft.data", "trainer.loggers", "trainer.project")


class Refused(ValueError):
    """A request named something the UI does not allow; the message says what and why."""


def override_allowed(key: str) -> bool:
    """Whether the dotted ``key`` may be overridden from the UI."""
    if any(key == r or key.startswith(r + ".") for r in REFUSED_OVERRIDES):
        return False
    return any(key.startswith(a) if a.endswith(".") else key == a for a in ALLOWED_OVERRIDES)


def check_overrides(overrides: Iterable[str]) -> list[str]:
    """The overrides unchanged, or :class:`Refused` naming every key outside the allow-list."""
    given = list(overrides)
    bad = [o.partition("=")[0].strip() or o for o in given if not override_allowed(o.partition("=")[0].strip())]
    if bad:
        raise Refused(
            f"override{'s' if len(bad) > 1 else ''} not allowed from the UI: {', '.join(bad)}. "
            f"The UI may set {', '.join(a + '*' if a.endswith('.') else a for a in ALLOWED_OVERRIDES)} "
            f"(not {', '.join(REFUSED_OVERRIDES)}); run other changes from a shell."
        )
    return given


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
            self.check_text(path.read_text(errors="replace"), path.parent)
        return path

    def check_text(self, text: str, base: Path) -> None:
        """Refuse a config's YAML whose ``local_plugins`` name a file outside the folders: loading the
        config imports them."""
        try:
            data: Any = yaml.safe_load(text)
        except yaml.YAMLError:
            return  # validation reports the YAML error itself
        locals_ = data.get("local_plugins") if isinstance(data, dict) else None
        if not isinstance(locals_, list):
            return
        for i, entry in enumerate(locals_):
            if isinstance(entry, str) and (entry.endswith(".py") or "/" in entry):
                try:
                    self.file(entry, base)
                except Refused as exc:
                    raise Refused(f"local_plugins[{i}]: {exc}") from None

    def describe(self) -> str:
        return ", ".join(str(f) for f in self.folders)
