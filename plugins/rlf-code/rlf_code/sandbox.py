"""One sandboxed interpreter: a process tree confined by :mod:`rlf_code.kernel`, driven over two pipes.

A sandbox keeps its state across calls (variables, imports, files) until it is closed, a call runs
past its time, or its code ends the interpreter; then every process of it is killed and its files go.
"""

from __future__ import annotations

import fcntl
import json
import os
import selectors
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from rlf_code.layers import CGROUP_V1, Layers, log
from rlf_code.settings import MB, Limits

KERNEL = Path(__file__).with_name("kernel.py")
INSIDE_WORKDIR = "/tmp/work"
"""The working directory inside a sandbox with its own mount namespace (a private tmpfs)."""
_SIGNALLED = 128  # a shell's exit status for a process a signal ended: 128 + the signal
KILL = shutil.which("kill") or "/bin/kill"


class SandboxError(RuntimeError):
    """A sandbox could not start: the message names the layer or limit that failed."""


@dataclass
class Output:
    """What one call produced. ``failure`` is set when the sandbox itself ended: ``timeout`` or ``crash``."""

    stdout: str = ""
    stderr: str = ""
    result: str | None = None
    error: str | None = None
    failure: str | None = None
    latency_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None and self.failure is None

    def render(self) -> str:
        """The call as the model reads it: each non-empty part under its name."""
        parts = [(n, v) for n, v in (("stdout", self.stdout), ("stderr", self.stderr), ("result", self.result)) if v]
        if self.error:
            parts.append(("error", self.error))
        return "\n".join(f"[{n}]\n{v.rstrip()}" for n, v in parts) or "[no output]"


class UidLease:
    """A uid no other sandbox on this machine holds (an flock on a file per uid, so several trainer
    processes share the range safely). Any process left with it from an earlier crash is killed."""

    def __init__(self, base: int, count: int):
        folder = Path(tempfile.gettempdir()) / "rlf-code-uids"
        folder.mkdir(mode=0o700, exist_ok=True)
        start = int.from_bytes(os.urandom(4), "big") % count
        for i in range(count):
            uid = base + (start + i) % count
            handle = open(folder / str(uid), "w")  # noqa: SIM115
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                continue
            self.uid, self._handle = uid, handle
            kill_uid(uid)
            return
        raise SandboxError(f"all {count} sandbox uids from {base} are taken: raise code.uid_count")

    def release(self) -> None:
        self._handle.close()


def kill_uid(uid: int) -> None:
    """SIGKILL every process of ``uid`` at once: ``kill -9 -1`` run as that uid reaches them all,
    wherever they moved (another session, another process group)."""
    subprocess.run(
        [KILL, "-9", "-1"], user=uid, group=uid, extra_groups=[], capture_output=True, check=False, close_fds=True
    )


def processes_of(uid: int) -> list[int]:
    """The pids of ``uid``'s processes (the tests' check that nothing is left behind)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    pids.append(int(entry.name))
            except FileNotFoundError:
                continue
    return pids


def live_in_group(pgid: int) -> list[int]:
    """The pids of the process group ``pgid`` that have not died yet (zombies are dead: only reaping is left)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (FileNotFoundError, ProcessLookupError, IndexError):
                continue
            if int(fields[2]) == pgid and fields[0] not in "ZX":
                pids.append(int(entry.name))
    return pids


def private_homes(python: str) -> tuple[list[str], list[str]]:
    """The folders to hide from a sandbox (this user's home, unless it is open to all) and, of the
    interpreter's own folders, those inside it, to expose again so that ``python`` still runs."""
    home = os.path.realpath(os.path.expanduser("~"))
    if home == "/" or not os.path.isdir(home):
        return [], []
    prefixes = subprocess.run(
        [python, "-I", "-S", "-c", "import sys; print(sys.prefix); print(sys.base_prefix)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    inside = sorted({os.path.realpath(p) for p in prefixes if os.path.realpath(p).startswith(home + os.sep)})
    return [home], [p for p in inside if not any(p.startswith(q + os.sep) for q in inside)]


class Cgroups:
    """cgroup v1 memory and pids groups of one sandbox: limits over all its processes together."""

    def __init__(self, name: str, limits: Limits):
        self.paths = [CGROUP_V1 / "memory" / "rlf-code" / name, CGROUP_V1 / "pids" / "rlf-code" / name]
        for path in self.paths:
            path.mkdir(parents=True, exist_ok=True)
        (self.paths[0] / "memory.limit_in_bytes").write_text(str(limits.memory_mb * MB))
        (self.paths[1] / "pids.max").write_text(str(limits.processes))

    @property
    def procs(self) -> list[str]:
        return [str(p / "cgroup.procs") for p in self.paths]

    def remove(self) -> None:
        """Remove both groups; one still busy after 5 s (a zombie not yet reaped) is left with a
        warning, and reused by the next sandbox of the same uid."""
        deadline = time.monotonic() + 5
        for path in self.paths:
            while path.exists():
                try:
                    path.rmdir()
                except OSError:
                    if time.monotonic() > deadline:
                        log.warning("rlf-code: cgroup %s is still busy; it is reused with this uid", path)
                        break
                    time.sleep(0.01)


class Sandbox:
    """A confined interpreter, started by :meth:`start`; :meth:`call` runs code in it, :meth:`close` ends it."""

    def __init__(
        self,
        limits: Limits,
        layers: Layers,
        python: str | None = None,
        *,
        network: bool = False,
        uid_base: int = 200_000,
        uid_count: int = 4096,
    ):
        self.limits, self.layers, self.network = limits, layers, network
        self.python = python or sys.executable
        self._uid_range = (uid_base, uid_count)
        self._max_message = 8 * limits.max_output_bytes + 65536
        """The largest answer read from the kernel, which cuts its fields so that their JSON fits."""
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None
        self._lease: UidLease | None = None
        self._cgroups: Cgroups | None = None
        self._host_workdir: str | None = None
        self.uid: int | None = None
        self.calls = 0

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> Sandbox:
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def _start(self) -> None:
        if self.layers.own_uid:
            self._lease = UidLease(*self._uid_range)
            self.uid = self._lease.uid
        if self.layers.cgroups:
            self._cgroups = Cgroups(str(self.uid), self.limits)
        if self.layers.namespaces:
            workdir = INSIDE_WORKDIR
        else:
            workdir = self._host_workdir = tempfile.mkdtemp(prefix="rlf-code-")
        limits = self.limits
        hidden, exposed = private_homes(self.python) if self.layers.namespaces else ([], [])
        spec = {
            "uid": self.uid,
            "gid": self.uid,
            "workdir": workdir,
            "mount_ns": self.layers.namespaces,
            "pid_ns": self.layers.namespaces,
            "net_ns": self.layers.namespaces and not self.network,
            "hide": hidden,
            "expose": exposed,
            "cgroups": self._cgroups.procs if self._cgroups else [],
            "tmpfs_bytes": limits.disk_mb * MB,
            "max_output_bytes": limits.max_output_bytes,
            "max_message_bytes": self._max_message,
            "limits": {
                "cpu_s": limits.cpu_s,
                "address_space_bytes": limits.memory_mb * MB,
                "file_size_bytes": limits.file_size_mb * MB,
                "open_files": limits.open_files,
                "processes": limits.processes if self.layers.own_uid else None,
            },
        }
        env = {
            "PATH": f"{Path(self.python).parent}:/usr/local/bin:/usr/bin:/bin",
            "HOME": workdir,
            "LANG": "C.UTF-8",
            "OMP_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1",
            "MPLBACKEND": "Agg",
        }
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115  (closed by close())
        self._proc = subprocess.Popen(
            [self.python, "-I", "-B", str(KERNEL), json.dumps(spec)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
            cwd="/",
            start_new_session=True,
            close_fds=True,
        )
        ready = self._receive(time.monotonic() + limits.start_timeout_s)
        if ready is None or "ready" not in ready:
            reason = (ready or {}).get("fatal") or self._stderr_tail() or f"no answer in {limits.start_timeout_s} s"
            raise SandboxError(f"the code sandbox did not start: {reason}")

    def call(self, code: str, mode: str = "python", timeout_s: float | None = None) -> Output:
        """Run ``code`` (Python, or a bash script with ``mode="bash"``); never raises for what the code does."""
        timeout = timeout_s or self.limits.call_timeout_s
        with self._lock:
            began = time.monotonic()
            if not self.alive:
                return Output(error="the sandbox is not running", failure="crash")
            self.calls += 1
            assert self._proc is not None and self._proc.stdin is not None
            data = json.dumps({"code": code, "mode": mode}).encode()
            try:
                os.write(self._proc.stdin.fileno(), struct.pack("!I", len(data)) + data)
                answer = self._receive(began + timeout)
            except OSError:
                answer = None
            if answer is None or "stdout" not in answer:
                out = self._failed(timeout, timed_out=time.monotonic() - began >= timeout)
            else:
                out = Output(
                    stdout=answer["stdout"], stderr=answer["stderr"], result=answer["result"], error=answer["error"]
                )
            out.latency_s = time.monotonic() - began
            return out

    def _failed(self, timeout: float, timed_out: bool) -> Output:
        code = None
        if self._proc is not None and not timed_out:
            try:  # the pipe closes a moment before the process is gone
                code = self._proc.wait(timeout=1)
            except subprocess.TimeoutExpired:
                pass
        self._kill()
        if code is not None and (code < 0 or code > _SIGNALLED):
            why = f"the interpreter was killed by {signal.Signals(abs(code) % _SIGNALLED).name} (a limit, or its code)"
        elif code is not None:
            why = f"the interpreter exited with status {code}"
        elif timed_out:
            why = f"the call ran past its {timeout:g} s limit"
        else:
            why = "the interpreter sent an unreadable answer"
        return Output(
            error=f"{why}: the sandbox was stopped and its state (variables, files) is lost",
            failure="timeout" if timed_out and code is None else "crash",
        )

    def _receive(self, deadline: float) -> dict[str, Any] | None:
        """One message from the kernel, or ``None`` on EOF, past ``deadline`` or when it is malformed."""
        head = self._read(4, deadline)
        if head is None:
            return None
        size = struct.unpack("!I", head)[0]
        if size > self._max_message:
            return None
        body = self._read(size, deadline)
        try:
            message = json.loads(body) if body is not None else None
        except ValueError:
            return None
        return message if isinstance(message, dict) else None

    def _read(self, n: int, deadline: float) -> bytes | None:
        assert self._proc is not None and self._proc.stdout is not None
        fd, chunks, left = self._proc.stdout.fileno(), [], n
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while left:
                wait = deadline - time.monotonic()
                if wait <= 0 or not sel.select(wait):
                    return None
                chunk = os.read(fd, left)
                if not chunk:
                    return None
                chunks.append(chunk)
                left -= len(chunk)
        return b"".join(chunks)

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace").strip()[-2000:]

    def _kill(self) -> None:
        """Kill every process of the sandbox: its process group, its pid namespace with it, and anything of its uid."""
        proc = self._proc
        if proc is not None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
            deadline = time.monotonic() + 5
            while live_in_group(proc.pid) and time.monotonic() < deadline:  # without a uid, the group is all we reach
                time.sleep(0.005)
        if self.uid is not None:
            deadline = time.monotonic() + 5
            kill_uid(self.uid)
            while processes_of(self.uid) and time.monotonic() < deadline:  # SIGKILL takes a moment to land
                time.sleep(0.005)
                kill_uid(self.uid)

    def close(self) -> None:
        """Kill it and remove everything it had: processes, files, cgroups, its uid."""
        with self._lock:
            self._kill()
            if self._proc is not None:
                for pipe in (self._proc.stdin, self._proc.stdout):
                    if pipe is not None:
                        pipe.close()
            if self._stderr is not None:
                self._stderr.close()
            if self._cgroups is not None:
                self._cgroups.remove()
            if self._host_workdir is not None:
                shutil.rmtree(self._host_workdir, ignore_errors=True)
            if self._lease is not None:
                self._lease.release()
            self._proc = self._stderr = self._cgroups = self._lease = self._host_workdir = None
