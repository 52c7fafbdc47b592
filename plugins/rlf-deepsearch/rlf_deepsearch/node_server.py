"""One retrieval server per node, shared by every worker process on it.

Under verl every rollout worker is its own process; each would load its own index (a dense one is
the encoder plus every vector). Instead the first worker to arrive starts ``rlf-deepsearch serve``
for the run's corpus and retriever, and every worker, the first included, is a client of it. A
lock file makes "look for a live server, else start one" atomic between processes; a state file
records the server's URL, its pid and the pids of its clients. A worker leaving removes its pid;
the last one out stops the server. A worker that died without leaving is pruned by the next
arrival or departure, so a crashed run does not keep a server alive past its next start.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http import HTTPStatus
from pathlib import Path
from typing import TypedDict

START_TIMEOUT_S = 1800.0  # a first dense build of a large corpus takes a while
_URL = re.compile(r"serving \d+ passages at (http://\S+)")


class _State(TypedDict):
    """A node server's state file: where it serves, its pid, and the pids of the processes using it."""

    url: str
    pid: int
    clients: list[int]


def server_command(
    corpus: Path,
    retriever: str,
    index_dir: Path | None,
    encoder: str,
    kind: str,
    k1: float,
    b: float,
    stemmer: str | None,
    batch_size: int,
) -> list[str]:
    """The ``rlf-deepsearch serve`` command line for these settings, on a free loopback port."""
    cmd = [
        sys.executable,
        "-m",
        "rlf_deepsearch.cli",
        "serve",
        "--corpus",
        str(corpus),
        "--port",
        "0",
        "--retriever",
        retriever,
        "--encoder",
        encoder,
        "--index-kind",
        kind,
        "--k1",
        str(k1),
        "--b",
        str(b),
        "--stemmer",
        stemmer or "none",
        "--batch-size",
        str(batch_size),
    ]
    return cmd + (["--index-dir", str(index_dir)] if index_dir else [])


def state_dir(index_dir: Path | None) -> Path:
    from rlf_deepsearch.index import default_cache_dir

    return Path(index_dir or default_cache_dir()) / "servers"


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _healthy(url: str) -> bool:
    import httpx

    try:
        return httpx.get(url.removesuffix("/retrieve") + "/health", timeout=5.0).status_code == HTTPStatus.OK
    except httpx.HTTPError:
        return False


def attach(cmd: list[str], folder: Path) -> str:
    """The URL of this node's server for ``cmd``, started now if none is alive; this process is a client."""
    key = hashlib.sha256(json.dumps(cmd[1:]).encode()).hexdigest()[:16]
    state, log = folder / f"{key}.json", folder / f"{key}.log"
    with _locked(folder / f"{key}.lock"):
        info: _State | None = json.loads(state.read_text()) if state.is_file() else None
        if info is None or not _alive(info["pid"]) or not _healthy(info["url"]):
            if info is not None and _alive(info["pid"]):
                os.kill(info["pid"], signal.SIGTERM)  # alive but not answering: replace it
            url, pid = _start(cmd, log)
            info = {"url": url, "pid": pid, "clients": []}
        info["clients"] = [p for p in info["clients"] if _alive(p) and p != os.getpid()] + [os.getpid()]
        state.write_text(json.dumps(info))
        return info["url"]


def _start(cmd: list[str], log: Path) -> tuple[str, int]:
    """Start the server detached from this process (it outlives it while other clients remain) and wait
    for the line that gives its URL; its URL and pid."""
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        found = _URL.search(log.read_text())
        if found:
            return found.group(1), proc.pid
        if proc.poll() is not None:
            raise RuntimeError(f"the node's retrieval server exited with {proc.returncode}: {log.read_text()[-2000:]}")
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"the node's retrieval server did not start within {START_TIMEOUT_S:g} s; see {log}")


def detach(cmd: list[str], folder: Path) -> bool:
    """Leave this node's server for ``cmd``; the last client stops it. True when it was stopped."""
    key = hashlib.sha256(json.dumps(cmd[1:]).encode()).hexdigest()[:16]
    state = folder / f"{key}.json"
    with _locked(folder / f"{key}.lock"):
        if not state.is_file():
            return False
        info: _State = json.loads(state.read_text())
        info["clients"] = [p for p in info["clients"] if _alive(p) and p != os.getpid()]
        if info["clients"]:
            state.write_text(json.dumps(info))
            return False
        if _alive(info["pid"]):
            os.kill(info["pid"], signal.SIGTERM)
        state.unlink()
        return True
