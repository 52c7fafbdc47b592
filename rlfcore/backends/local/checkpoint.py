"""Damaged checkpoints: which file is broken, and which earlier checkpoint is whole.

A checkpoint is written to a temporary folder and renamed into place, so a crash while saving leaves
no half-written ``step_N``; a full disk, a copy cut short or a failing file system still can. The
libraries' errors then name neither the file nor a way out (``OSError: [Errno 22]``, ``SafetensorError:
incomplete metadata``); :class:`CheckpointError` names both.
"""

from __future__ import annotations

import json
import struct
import zipfile
from pathlib import Path

_LENGTH_BYTES = 8
"""A safetensors file starts with its JSON header's length, a little-endian u64."""


class CheckpointError(RuntimeError):
    """A checkpoint cannot be loaded (the message names the file and the intact checkpoint to use
    instead) or saved (it names the checkpoint; no partial copy is left)."""


def damage(checkpoint: Path) -> str | None:
    """Why ``checkpoint`` cannot be loaded (a file missing, truncated or not of its format), or ``None``.

    Reads only the files' headers and directories, which a truncated file lacks or contradicts.
    """
    trainer = checkpoint / "trainer.pt"
    weights = sorted((checkpoint / "model").glob("*.safetensors"))
    if not trainer.is_file():
        return f"{trainer} is missing"
    if not weights:
        return f"{checkpoint / 'model'} holds no .safetensors weights"
    for path in weights:
        problem = safetensors_damage(path)
        if problem is not None:
            return f"{path}: {problem}"
    try:
        with zipfile.ZipFile(trainer) as archive:  # torch.save writes a zip; its directory is at the end
            size = trainer.stat().st_size
            if any(info.header_offset + info.compress_size > size for info in archive.infolist()):
                return f"{trainer}: a record runs past the end of the file"
    except (zipfile.BadZipFile, OSError) as exc:
        return f"{trainer}: not a whole torch.save file ({exc})"
    return None


def safetensors_damage(path: Path) -> str | None:
    """Whether a safetensors file is whole: its header parses and its tensors end where the file does."""
    try:
        with path.open("rb") as f:
            head = f.read(_LENGTH_BYTES)
            if len(head) < _LENGTH_BYTES:
                return "shorter than a safetensors header"
            (length,) = struct.unpack("<Q", head)
            size = path.stat().st_size
            if _LENGTH_BYTES + length > size:
                return f"the header says {length} bytes of metadata, the file has {size - _LENGTH_BYTES}"
            header = json.loads(f.read(length))
    except (OSError, ValueError) as exc:
        return f"unreadable header ({exc})"
    ends = [t["data_offsets"][1] for k, t in header.items() if k != "__metadata__" and isinstance(t, dict)]
    expected = _LENGTH_BYTES + length + max(ends, default=0)
    if expected != size:
        return f"truncated: the tensors need {expected} bytes, the file has {size}"
    return None


def last_intact(checkpoints: list[Path], before: Path) -> Path | None:
    """The latest checkpoint sorted before ``before`` that :func:`damage` finds whole."""
    for candidate in sorted((p for p in checkpoints if p.name < before.name), reverse=True):
        if damage(candidate) is None:
            return candidate
    return None


def load_error(checkpoint: Path, file: Path, exc: BaseException, checkpoints: list[Path]) -> CheckpointError:
    """The error for a checkpoint whose ``file`` failed to load with ``exc``."""
    why = damage(checkpoint) or f"{file} could not be loaded ({type(exc).__name__}: {exc})"
    good = last_intact(checkpoints, checkpoint)
    if good is not None:
        way_out = f"the last intact checkpoint is {good}: continue from it with --resume-from {good}"
    else:
        way_out = "no earlier checkpoint is intact: start again in a new --run-dir"
    return CheckpointError(f"cannot resume from {checkpoint}, it is damaged: {why}; {way_out}")
