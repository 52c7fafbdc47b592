"""Reading a run folder's JSON and JSONL files defensively: a live run's last line may be half
written, trainers of other versions write other fields, and a file may hold anything."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def read_json(path: Path) -> Any:
    """The JSON value in ``path``; ``None`` when it is missing or unreadable."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def read_jsonl_from(path: Path, offset: int = 0, limit_bytes: int = 32 << 20) -> tuple[list[dict[str, Any]], int]:
    """Complete JSON lines from byte ``offset`` on, and the offset after the last complete line.

    A half-written last line is left for the next call; unreadable lines are skipped.
    """
    try:
        with path.open("rb") as f:
            f.seek(offset)
            chunk = f.read(limit_bytes)
    except OSError:
        return [], offset
    end = chunk.rfind(b"\n") + 1
    rows = []
    for line in chunk[:end].splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows, offset + end


def read_jsonl_tail(path: Path, n: int) -> list[dict[str, Any]]:
    """The last ``n`` complete JSON lines, reading from the end of the file only."""
    lines = tail_lines(path, n)
    out = []
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            out.append(row)
    return out


def tail_lines(path: Path, n: int, block: int = 64 << 10, max_bytes: int = 1 << 20, max_chars: int = 4000) -> list[str]:
    """The last ``n`` complete lines of a file, read backwards in blocks: at most ``max_bytes`` read and
    each line cut to ``max_chars``, so one enormous progress line costs what a short log does."""
    try:
        f = path.open("rb")
    except OSError:
        return []
    chunks: list[bytes] = []
    with f:
        f.seek(0, os.SEEK_END)
        size = pos = f.tell()
        newlines = 0
        while pos > 0 and newlines <= n and size - pos < max_bytes:
            step = min(block, pos)
            pos -= step
            f.seek(pos)
            chunks.append(f.read(step))
            newlines += chunks[-1].count(b"\n")
    data = b"".join(reversed(chunks))
    if size and not data.endswith(b"\n"):
        data = data[: data.rfind(b"\n") + 1]  # the line being written
    head = ""
    if pos > 0:  # the first line read may have begun before what was read
        first = data.find(b"\n") + 1
        head, data = (
            (f"[… {pos:,} earlier bytes not read]", data[first:]) if first else ("[… a line too long to show]", b"")
        )
    lines = data.decode("utf-8", "replace").splitlines()
    cut = [
        line if len(line) <= max_chars else f"{line[:max_chars]} [… {len(line) - max_chars:,} more characters]"
        for line in lines
    ]
    out = ([head] if head and not cut else []) + cut
    return out[-n:] if n else []
