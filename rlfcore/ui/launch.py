"""The launch page's processes: ``rlf train`` / ``rlf eval`` (local backend) started, stopped, resumed.

Each launch runs ``python -m rlfcore ...`` in its own session, its output in ``<run>/ui.log`` and its
command, pid and (once it ended) exit code in ``<run>/ui_launch.json``, with ``stopped`` when the Stop
button ended it: the only files the UI writes. Stopping sends SIGTERM to the whole process group (tool
servers included), then SIGKILL.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from rlfcore.rundata.files import read_json
from rlfcore.ui.runs import LAUNCH_FILE

LOG_FILE = "ui.log"


class LaunchError(ValueError):
    """A launch the page refuses, with the reason."""


def command(
    kind: str, config: Path, run: Path, overrides: list[str], resume: bool = False, dry_run: bool = False
) -> list[str]:
    """The ``rlf`` command line a launch runs."""
    base = [sys.executable, "-m", "rlfcore"]
    if kind == "train":
        return [*base, "train", str(config), *overrides, "--run-dir", str(run), *(["--resume"] if resume else [])]
    if kind == "eval":
        return [*base, "eval", str(config), *overrides, "--out", str(run / "eval.jsonl")]
    if kind == "verl":
        return [
            *base,
            "train",
            str(config),
            *overrides,
            "--backend",
            "verl",
            "--run-dir",
            str(run),
            *(["--dry-run"] if dry_run else []),
        ]
    raise LaunchError(f"unknown launch kind {kind!r}: train, eval or verl")


class Launcher:
    """The processes this UI started, by run folder."""

    def __init__(self) -> None:
        self.procs: dict[Path, subprocess.Popen[bytes]] = {}
        self.stopping: set[Path] = set()  # runs whose end the Stop button asked for: stopped, not failed
        self._lock = threading.Lock()

    def start(self, kind: str, config: Path, run: Path, overrides: list[str], resume: bool = False) -> dict[str, Any]:
        if not config.is_file():
            raise LaunchError(f"no such config file: {config}")
        with self._lock:
            if self.running(run):
                raise LaunchError(f"{run.name} is already running")
            if kind == "train" and not resume and (run / "metrics.jsonl").exists():
                raise LaunchError(f"{run} already holds a run: resume it, or choose another folder")
            run.mkdir(parents=True, exist_ok=True)
            argv = command(kind, config, run, overrides, resume)
            log = (run / LOG_FILE).open("ab")
            log.write(f"\n$ {' '.join(argv[2:])}\n".encode())
            log.flush()
            env = {**os.environ, "PYTHONUNBUFFERED": "1", "TERM": "dumb", "COLUMNS": "120"}
            proc = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=config.parent,
                env=env,
                start_new_session=True,
            )
            log.close()
            record = {
                "kind": kind,
                "config": str(config),
                "overrides": overrides,
                "resume": resume,
                "command": argv,
                "pid": proc.pid,
                "started": time.time(),
                "rc": None,
            }
            self._write(run, record)
            self.procs[run] = proc
            self.stopping.discard(run)
        threading.Thread(target=self._wait, args=(run, proc, record), daemon=True).start()
        return record

    def _wait(self, run: Path, proc: subprocess.Popen[bytes], record: dict[str, Any]) -> None:
        rc = proc.wait()
        self._write(run, {**record, "rc": rc, "ended": time.time(), "stopped": run in self.stopping})

    def _write(self, run: Path, record: dict[str, Any]) -> None:
        tmp = run / f".{LAUNCH_FILE}.tmp"
        tmp.write_text(json.dumps(record, indent=2))
        tmp.replace(run / LAUNCH_FILE)

    def running(self, run: Path) -> bool:
        proc = self.procs.get(run)
        return proc is not None and proc.poll() is None

    def stop(self, run: Path, grace_s: float = 10.0) -> int | None:
        """Stop the run's process group; its exit code, or None when nothing was running."""
        proc = self.procs.get(run)
        if proc is None or proc.poll() is not None:
            return None
        self.stopping.add(run)
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            return proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            return proc.wait(grace_s)
        except ProcessLookupError:
            return proc.wait(grace_s)

    def stop_all(self) -> None:
        for run in list(self.procs):
            self.stop(run)

    @staticmethod
    def record(run: Path) -> dict[str, Any] | None:
        found = read_json(run / LAUNCH_FILE)
        return found if isinstance(found, dict) else None


def dry_run(config: Path, run: Path, overrides: list[str], timeout_s: float = 300.0) -> tuple[int, str, list[str]]:
    """``rlf train --backend verl --dry-run``: its exit code and output, and the command."""
    argv = command("verl", config, run, overrides, dry_run=True)
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            cwd=config.parent,
            timeout=timeout_s,
            env={**os.environ, "TERM": "dumb"},
            check=False,  # its exit code is returned, with the output
        )
    except subprocess.TimeoutExpired as exc:
        partial = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
        return 124, f"timed out after {timeout_s:.0f} s\n{partial}", argv
    return done.returncode, done.stdout + done.stderr, argv
