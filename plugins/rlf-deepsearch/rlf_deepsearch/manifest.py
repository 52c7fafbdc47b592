"""A cache folder's manifest: what its files must hash to and what they were built from, checked on load.

The manifest is written last, once the files it lists are flushed to disk, and atomically (a
temporary file renamed over it), so a folder whose manifest is present and matches is complete and
unchanged. Every load checks each file's size (a truncation is named as such) and SHA-256 (flipped
bytes, a file copied in from another cache), and the identity the folder was built for (corpus and
encoder hashes): hashing runs at about 1.7 GB/s, as fast as FAISS reads the index, so it is done on
every load rather than trusted to a size and mtime stamp, which bit rot does not change.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from rlf_deepsearch.corpus import CorpusError
from rlf_deepsearch.index import file_digest

MANIFEST = "manifest.json"
MANIFEST_FORMAT = 1


class CacheError(CorpusError):
    """A cached index is damaged or was built for something else; the message says what and how to rebuild."""


def write_manifest(
    folder: Path, files: list[str], identity: dict[str, str], about: dict[str, Any], meta: dict[str, Any]
) -> None:
    """Flush ``files`` of ``folder`` and record their sizes and SHA-256 with what they were built from.

    ``identity`` is compared on load (hashes: equal means the same inputs); ``about`` describes the
    same inputs for people (paths, names, versions) and is only quoted in errors; ``meta`` is kept."""
    entries = {}
    for name in files:
        path = folder / name
        with path.open("rb") as f:
            os.fsync(f.fileno())
        entries[name] = {"bytes": path.stat().st_size, "sha256": file_digest(path)}
    manifest = {"format": MANIFEST_FORMAT, "identity": identity, "about": about, "files": entries, **meta}
    tmp = folder / f"{MANIFEST}.tmp"
    with tmp.open("w") as f:
        json.dump(manifest, f, indent=2)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, folder / MANIFEST)


def verify(
    folder: Path, files: list[str], identity: dict[str, str], about: dict[str, Any], rebuild: str
) -> dict[str, Any]:
    """The manifest of ``folder`` once its identity and each of ``files`` match it; CacheError naming
    the difference and the command ``rebuild`` otherwise."""
    hint = f"rebuild it with: {rebuild}"
    path = folder / MANIFEST
    if not path.is_file():
        raise CacheError(f"{folder}: no {MANIFEST}, so its files cannot be checked (an interrupted build?); {hint}")
    try:
        manifest = json.loads(path.read_bytes())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CacheError(f"{path} is not readable JSON ({exc}); {hint}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        raise CacheError(f"{path}: not a manifest of format {MANIFEST_FORMAT}; {hint}")
    cached, cached_about = manifest.get("identity") or {}, manifest.get("about") or {}
    differ = [
        f"{key}: built for {cached_about.get(key, '?')} ({str(cached.get(key))[:16]}), "
        f"this run has {about.get(key, '?')} ({value[:16]})"
        for key, value in identity.items()
        if cached.get(key) != value
    ]
    if differ:
        raise CacheError(f"{folder} was built from other inputs: {'; '.join(differ)}; {hint}")
    listed = manifest.get("files") or {}
    for name in files:
        file, entry = folder / name, listed.get(name)
        if entry is None:
            raise CacheError(f"{path} lists no {name}, so it cannot be checked; {hint}")
        if not file.is_file():
            raise CacheError(f"{file} is missing; {hint}")
        size = file.stat().st_size
        if size != entry["bytes"]:
            what = "truncated" if size < entry["bytes"] else "grown"
            raise CacheError(f"{file} is {size} bytes, its manifest says {entry['bytes']} ({what}); {hint}")
        if (digest := file_digest(file)) != entry["sha256"]:
            raise CacheError(
                f"{file} has SHA-256 {digest[:16]}..., its manifest says {entry['sha256'][:16]}...: "
                f"its bytes changed after the build (damage, or a file copied from another cache); {hint}"
            )
    return manifest
