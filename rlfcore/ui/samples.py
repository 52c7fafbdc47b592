"""Sample files (a run's ``samples/step_N.jsonl``, ``rlf eval`` output) indexed by byte offset.

A page shows a few trajectories, so it reads only their lines: the index keeps, per line, its offset
and the handful of fields the filters need, built in one streaming pass (never the whole file in
memory) and extended, not rebuilt, when a live run appends to the file. A file rewritten since (a
resumed run writes its step again; it may then be longer) is told apart from one appended to by its
inode and the bytes the index last ended on, and indexed anew.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class Entry:
    """One trajectory's line: where it is, and what the lists and filters show."""

    offset: int
    length: int
    id: str
    row_id: str
    env: str | None
    reward: float | None
    stop_reason: str
    tool_calls: int
    tool_errors: int
    turns: int
    truncated: bool
    reward_error: bool
    mismatch: bool
    components: dict[str, float]

    @classmethod
    def of(cls, offset: int, length: int, rec: dict[str, Any]) -> Entry:
        comps = rec.get("reward_components")
        return cls(
            offset=offset,
            length=length,
            id=str(rec.get("id", "")),
            row_id=str(rec.get("row_id", rec.get("id", ""))),
            env=rec.get("env") if isinstance(rec.get("env"), str) else None,
            reward=rec["reward"] if isinstance(rec.get("reward"), (int, float)) else None,
            stop_reason=str(rec.get("stop_reason", "")),
            tool_calls=_int(rec.get("tool_calls")),
            tool_errors=_int(rec.get("tool_errors")),
            turns=_int(rec.get("num_turns")),
            truncated=bool(rec.get("truncated")),
            reward_error=bool(rec.get("reward_error")),
            mismatch=bool(rec.get("template_mismatch")),
            components={k: v for k, v in comps.items() if isinstance(v, (int, float))}
            if isinstance(comps, dict)
            else {},
        )


def _int(v: Any) -> int:
    return int(v) if isinstance(v, (int, float)) else 0


class SampleIndex:
    """The index of one JSONL file of trajectories; :meth:`refresh` picks up appended lines."""

    def __init__(self, path: Path):
        self.path = path
        self.entries: list[Entry] = []
        self.groups: dict[str, list[int]] = {}
        self._end = 0
        self._size = -1
        self._ino = -1
        self._tail = b""  # the last bytes indexed: still there unless the file was rewritten
        self._lock = threading.Lock()

    def refresh(self) -> SampleIndex:
        with self._lock:
            try:
                st = self.path.stat()
            except OSError:
                return self
            if st.st_ino != self._ino or st.st_size < self._end or not self._still_there():
                self.entries, self.groups, self._end, self._size, self._tail = [], {}, 0, -1, b""
                self._ino = st.st_ino
            if st.st_size != self._size:
                self._scan()
                self._size = st.st_size
        return self

    def _still_there(self) -> bool:
        if not self._tail:
            return True
        with self.path.open("rb") as f:
            f.seek(self._end - len(self._tail))
            return f.read(len(self._tail)) == self._tail

    def _scan(self) -> None:
        with self.path.open("rb") as f:
            f.seek(self._end)
            offset = self._end
            for line in f:
                if not line.endswith(b"\n"):
                    break  # being written; read it next time
                try:
                    rec = json.loads(line)
                except ValueError:
                    rec = None
                if isinstance(rec, dict):
                    self.groups.setdefault(str(rec.get("row_id", rec.get("id", ""))), []).append(len(self.entries))
                    self.entries.append(Entry.of(offset, len(line), rec))
                offset += len(line)
                self._tail = line[-64:]
            self._end = offset

    def read(self, i: int) -> dict[str, Any]:
        """The full record of entry ``i``, read from its offset."""
        e = self.entries[i]
        with self.path.open("rb") as f:
            f.seek(e.offset)
            record: dict[str, Any] = json.loads(f.read(e.length))
        return record

    def raw(self, i: int, chunk: int = 1 << 20) -> Iterator[bytes]:
        """Entry ``i``'s line as stored, in chunks (a line may be hundreds of megabytes)."""
        e = self.entries[i]
        with self.path.open("rb") as f:
            f.seek(e.offset)
            left = e.length
            while left > 0:
                data = f.read(min(chunk, left))
                if not data:
                    return
                left -= len(data)
                yield data

    def filter(
        self,
        min_reward: float | None = None,
        max_reward: float | None = None,
        stop_reason: str | None = None,
        tool_error: bool = False,
        env: str | None = None,
        mismatch: bool = False,
        search: str | None = None,
    ) -> list[int]:
        """Entries matching every given filter; ``search`` scans the raw lines, chunk by chunk."""
        keep = []
        for i, e in enumerate(self.entries):
            if min_reward is not None and (e.reward is None or e.reward < min_reward):
                continue
            if max_reward is not None and (e.reward is None or e.reward > max_reward):
                continue
            if stop_reason and e.stop_reason != stop_reason:
                continue
            if tool_error and not e.tool_errors:
                continue
            if env and e.env != env:
                continue
            if mismatch and not e.mismatch:
                continue
            keep.append(i)
        if search:
            hits = set(self._search(search.lower(), keep))
            keep = [i for i in keep if i in hits]
        return keep

    def _search(self, needle: str, among: list[int]) -> Iterator[int]:
        raw = needle.encode()
        escaped = json.dumps(needle, ensure_ascii=False)[1:-1].encode()  # as it appears inside JSON strings
        with self.path.open("rb") as f:
            for i in among:
                e = self.entries[i]
                f.seek(e.offset)
                line = f.read(e.length).lower()
                if raw in line or escaped in line:
                    yield i

    def stop_reasons(self) -> list[str]:
        return sorted({e.stop_reason for e in self.entries if e.stop_reason})

    def envs(self) -> list[str]:
        return sorted({e.env for e in self.entries if e.env})


class SampleFiles:
    """One shared index per file, so each file is scanned once per UI process."""

    def __init__(self) -> None:
        self._indexes: dict[Path, SampleIndex] = {}
        self._lock = threading.Lock()

    def get(self, path: Path) -> SampleIndex:
        with self._lock:
            index = self._indexes.get(path)
            if index is None:
                index = self._indexes[path] = SampleIndex(path)
        return index.refresh()


def sample_files(run: Path) -> list[Path]:
    """A run's sample files by step, then any ``rlf eval`` output the launch page wrote there."""
    return sorted((run / "samples").glob("*.jsonl")) + eval_outputs(run)


def eval_outputs(run: Path) -> list[Path]:
    """The ``rlf eval`` trajectory files in a run folder (``eval*.jsonl``), without the per-row difficulty
    file ``rlf eval --repeats`` writes beside one (``eval.difficulty.jsonl``): its lines are rows, not
    trajectories."""
    return sorted(p for p in run.glob("eval*.jsonl") if not p.name.endswith(".difficulty.jsonl"))


def step_of(path: Path) -> int | None:
    digits = "".join(c for c in path.stem if c.isdigit())
    return int(digits) if digits else None
