"""The passage corpus: a JSONL file read by line offset, so memory holds 8 bytes per passage, not its text.

Each line is ``{"id", "title", "text"}``. Search-R1's own layout, ``{"id", "contents"}`` with
``contents`` = ``"Title"\\ntext``, is read too, so its Wikipedia dumps work unchanged.
"""

from __future__ import annotations

import json
import mmap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


class CorpusError(ValueError):
    """A corpus file or line is unusable; the message names the file and line."""


@dataclass(frozen=True)
class Passage:
    id: str
    title: str
    text: str
    score: float = 0.0

    @property
    def contents(self) -> str:
        """Search-R1's ``contents`` field: the quoted title, a newline, the text."""
        return f'"{self.title}"\n{self.text}'


def parse_passage(obj: Any, where: str, default_id: str) -> Passage:
    """One corpus line's object as a Passage; ``where`` names the line in errors."""
    if not isinstance(obj, dict):
        raise CorpusError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    if isinstance(obj.get("text"), str):
        title, text = obj.get("title") or "", obj["text"]
    elif isinstance(obj.get("contents"), str):
        title, text = split_contents(obj["contents"])
    else:
        raise CorpusError(
            f"{where}: a passage needs a string 'text' (or Search-R1's 'contents'), got keys {sorted(obj)}"
        )
    return Passage(id=str(obj.get("id", default_id)), title=str(title), text=text)


def split_contents(contents: str) -> tuple[str, str]:
    """Search-R1's ``"Title"\\ntext`` as (title, text)."""
    head, _, rest = contents.partition("\n")
    return head.strip().strip('"'), rest


def scan(path: Path) -> Iterator[tuple[int, Passage]]:
    """Every passage of a JSONL corpus with the byte offset of its line; blank lines are skipped.

    A passage without an ``id`` gets its position among the passages.
    """
    offset, position = 0, 0
    with path.open("rb") as f:
        for n, line in enumerate(f, 1):
            start, offset = offset, offset + len(line)
            if not line.strip():
                continue
            where = f"{path}:{n}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise CorpusError(f"{where}: not valid JSON: {exc.msg} (column {exc.colno})") from None
            yield start, parse_passage(obj, where, str(position))
            position += 1


class Corpus:
    """Passages looked up by position; the file must not change while the index is in use."""

    def __init__(self, path: Path, offsets: np.ndarray):
        self.path = path
        self.offsets = offsets  # one start per passage
        self._file = path.open("rb")
        self._map = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)

    def __len__(self) -> int:
        return len(self.offsets)

    def __getitem__(self, i: int) -> Passage:
        start = int(self.offsets[i])
        end = self._map.find(b"\n", start)
        line = self._map[start : end if end != -1 else len(self._map)]
        return parse_passage(json.loads(line), f"{self.path} (passage {i})", str(i))

    def close(self) -> None:
        self._map.close()
        self._file.close()
