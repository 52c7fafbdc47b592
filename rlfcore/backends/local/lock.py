"""One process per run folder: an exclusive lock held from the first write to the last.

Two ``rlf train`` on one folder would interleave their metrics and overwrite each other's
checkpoints. The lock is ``flock`` on ``RUN/.rlf.lock``: the kernel releases it when its holder exits,
killed or not, so a crashed run leaves nothing to clean up; the file keeps the holder's pid for the
message of the process that is refused.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from types import TracebackType

LOCK_FILE = ".rlf.lock"


class RunDirError(ValueError):
    """The run folder cannot be used as asked: it holds another run, another process has it, or a resume
    would change what the run means. The message says what to do instead."""


class RunDirInUse(RunDirError):
    """Another process holds the run folder's lock."""


class RunLock:
    """``with RunLock(folder):`` holds the folder for this process, or raises :class:`RunDirInUse`
    naming the holder's pid; the refused process writes nothing."""

    def __init__(self, folder: Path):
        self.path = folder / LOCK_FILE
        self.fd: int | None = None

    def __enter__(self) -> RunLock:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)  # no O_TRUNC: the holder's pid stays
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise RunDirInUse(
                f"{self.path.parent} is in use by another rlf process (pid {holder}): wait for it to finish or stop "
                "it, or choose another --run-dir"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self.fd = fd
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing releases the lock; the file stays, so no second file can race it
            self.fd = None
