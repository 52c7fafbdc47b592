"""The program inside a sandbox: it confines itself, then serves calls like a notebook kernel.

Run by :mod:`rlf_code.sandbox` as ``python -I kernel.py SPEC``, stdlib only (it must not import
rlf_code or anything the sandboxed code could replace). As root it joins its cgroups, enters new
mount, network and pid namespaces, mounts private tmpfs over the world-writable folders, sets its
rlimits and drops to the sandbox's own uid before any sandboxed code runs. Requests and answers are
length-prefixed JSON on the two pipes the host gave it (moved off fds 0/1, which become /dev/null and
the call's captured stdout).
"""

from __future__ import annotations

import ast
import ctypes
import json
import linecache
import os
import resource
import signal
import struct
import subprocess
import sys
import traceback
from typing import Any

CLONE_NEWNS = 0x00020000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND, MS_MOVE, MS_REC, MS_PRIVATE = 2, 4, 8, 4096, 8192, 16384, 1 << 18
PR_SET_NO_NEW_PRIVS = 38
PRIVATE_TMP = ("/tmp", "/var/tmp", "/dev/shm")
LIMITS = {
    "cpu_s": resource.RLIMIT_CPU,
    "address_space_bytes": resource.RLIMIT_AS,
    "file_size_bytes": resource.RLIMIT_FSIZE,
    "open_files": resource.RLIMIT_NOFILE,
    "processes": resource.RLIMIT_NPROC,
}
CUT = "[... {} more bytes cut]"
UTF8_TAIL_MASK, UTF8_TAIL = 0xC0, 0x80  # a UTF-8 continuation byte is 0b10xxxxxx
libc = ctypes.CDLL(None, use_errno=True)


def send(fd: int, message: dict[str, Any]) -> None:
    data = json.dumps(message).encode()
    os.write(fd, struct.pack("!I", len(data)))
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def receive(fd: int) -> dict[str, Any] | None:
    head = read_exact(fd, 4)
    return None if head is None else json.loads(read_exact(fd, struct.unpack("!I", head)[0]) or b"{}")


def read_exact(fd: int, n: int) -> bytes | None:
    chunks, left = [], n
    while left:
        chunk = os.read(fd, left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(source: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    check(
        libc.mount(
            source.encode(),
            target.encode(),
            fstype.encode() if fstype else None,
            flags,
            data.encode() if data else None,
        ),
        f"mount {fstype or source} on {target}",
    )


def confine(spec: dict[str, Any], req: int, resp: int) -> None:
    """Every layer the spec asks for, in the order that keeps each possible; raises on the first that
    fails. Returns in the process that serves calls; the processes it forks to get there only wait."""
    for procs in spec["cgroups"]:
        with open(procs, "w") as f:
            f.write(str(os.getpid()))
    flags = (CLONE_NEWNS if spec["mount_ns"] else 0) | (CLONE_NEWNET if spec["net_ns"] else 0)
    flags |= CLONE_NEWPID if spec["pid_ns"] else 0
    if flags:
        check(libc.unshare(flags), "unshare")
    if spec["mount_ns"]:
        mount("none", "/", None, MS_REC | MS_PRIVATE)
        for folder in PRIVATE_TMP:
            if os.path.isdir(folder):
                mount("tmpfs", folder, "tmpfs", MS_NOSUID | MS_NODEV, f"size={spec['tmpfs_bytes']},mode=1777")
        hide(spec["hide"], spec["expose"])
    if spec["pid_ns"]:
        wait_for_child(req, resp)  # the child is pid 1 of the new namespace
        if spec["mount_ns"]:
            mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    workdir = spec["workdir"]
    os.makedirs(workdir, mode=0o700, exist_ok=True)
    if spec["uid"] is not None:
        os.chown(workdir, spec["uid"], spec["gid"])
    for name, limit in LIMITS.items():
        value = spec["limits"].get(name)
        if value is not None:
            resource.setrlimit(limit, (value, value))
    check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(no_new_privs)")
    if spec["uid"] is not None:
        os.setgroups([])
        os.setgid(spec["gid"])
        os.setuid(spec["uid"])
    os.chdir(workdir)
    if spec["pid_ns"]:
        wait_for_child(req, resp, reap=True)  # pid 1 reaps orphans; the kernel is pid 2


def hide(folders: list[str], expose: list[str]) -> None:
    """Put an empty tmpfs over each of ``folders`` (the trainer's home: keys, caches, configs), then
    bind ``expose`` (the interpreter that lives there) back at the same paths."""
    stages = []
    for i, path in enumerate(expose):
        stage = f"/tmp/.expose-{i}"
        os.mkdir(stage)
        mount(path, stage, None, MS_BIND | MS_REC)
        stages.append(stage)
    for folder in folders:
        mount("tmpfs", folder, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755")
    for stage, path in zip(stages, expose):
        os.makedirs(path, mode=0o755, exist_ok=True)
        mount(stage, path, None, MS_MOVE)
        os.rmdir(stage)


def wait_for_child(req: int, resp: int, reap: bool = False) -> None:
    """Fork; the child returns, the parent lets go of the pipes and exits with the child.

    As pid 1 of a pid namespace (``reap``) it also reaps every orphan; its exit ends every process
    left in the namespace, so nothing outlives the kernel."""
    child = os.fork()
    if child == 0:
        return
    for fd in (0, 1, req, resp):
        os.close(fd)
    while True:
        try:
            pid, status = os.wait() if reap else os.waitpid(child, 0)
        except ChildProcessError:
            os._exit(0)
        if pid == child:
            code = os.waitstatus_to_exitcode(status)
            os._exit(128 - code if code < 0 else code)  # a signal as a shell says it: 128 + its number


class Capture:
    """A call's stdout or stderr: an unlinked file on ``fd`` (subprocesses write there too), read back
    up to ``limit`` bytes after each call (one more, to see whether the cut splits a character)."""

    def __init__(self, fd: int, limit: int):
        self.fd, self.limit = fd, limit
        tmp = os.open(".", os.O_TMPFILE | os.O_RDWR, 0o600)
        os.dup2(tmp, fd)
        os.close(tmp)

    def reset(self) -> None:
        os.ftruncate(self.fd, 0)
        os.lseek(self.fd, 0, os.SEEK_SET)

    def read(self) -> tuple[bytes, int]:
        data = os.pread(self.fd, self.limit + 1, 0)
        return data, max(len(data), os.fstat(self.fd).st_size)  # a child still writing may change it


def clip(data: bytes, size: int, limit: int, room: int, tail: bool = False) -> str:
    """A field of ``size`` bytes (``data`` is all of it or, when it is longer, at least its first, or
    ``tail`` last, ``limit`` + 1 bytes) as text: its first (``tail``: last) ``limit`` bytes at most, fewer where their JSON string would take
    more than ``room`` bytes (an escape takes up to 6 bytes a byte), and the marker where bytes are cut.
    A cut falls between characters."""

    def kept(n: int) -> bytes:
        if tail:
            start = len(data) - n
            while start < len(data) and data[start] & UTF8_TAIL_MASK == UTF8_TAIL:
                start += 1
            return data[start:]
        while 0 < n < len(data) and data[n] & UTF8_TAIL_MASK == UTF8_TAIL:
            n -= 1
        return data[:n]

    def shown(n: int) -> str:
        part = kept(n)
        text = part.decode("utf-8", "replace")
        if len(part) == size:
            return text
        mark = CUT.format(size - len(part))
        return f"{mark}\n{text}" if tail else f"{text}\n{mark}"

    def fits(n: int) -> bool:
        return len(json.dumps(shown(n))) <= room

    low, high = 0, min(len(data), limit)
    if fits(high):
        return shown(high)
    while low < high:  # the longest cut that fits; the marker alone always does
        mid = (low + high + 1) // 2
        low, high = (mid, high) if fits(mid) else (low, mid - 1)
    return shown(low)


class Kernel:
    """One interpreter state, kept across calls: a notebook kernel."""

    def __init__(self, max_output: int, max_message: int):
        self.namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": __builtins__}
        self.max_output = max_output
        self.room = (max_message - 256) // 4  # each of the four fields' share of a frame; keys and nulls take < 256
        self.cells = 0
        self.pid = os.getpid()
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        self.out, self.err = Capture(1, max_output), Capture(2, max_output)
        sys.stdout = open(1, "w", buffering=1, errors="backslashreplace", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, errors="backslashreplace", closefd=False)  # noqa: SIM115
        sys.stdin = open(0, closefd=False)  # noqa: SIM115

    def call(self, request: dict[str, Any]) -> dict[str, Any]:
        self.out.reset()
        self.err.reset()
        result, error = None, None
        try:
            if request.get("mode") == "bash":
                done = subprocess.run(["bash", "-c", request["code"]], stdin=subprocess.DEVNULL, check=False)
                error = None if done.returncode == 0 else f"bash exited with status {done.returncode}"
            else:
                result = self.python(request["code"])
        except BaseException as exc:  # the model's code may raise anything, SystemExit included
            error = user_traceback(exc)
        if os.getpid() != self.pid:  # a child the code forked came back here: it must not answer
            os._exit(1)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        limit, room = self.max_output, self.room
        return {
            "stdout": clip(*self.out.read(), limit, room),
            "stderr": clip(*self.err.read(), limit, room),
            "result": None if result is None else self.clip_text(result, tail=False),
            "error": None if error is None else self.clip_text(error, tail=True),  # a traceback ends with the error
        }

    def clip_text(self, text: str, tail: bool) -> str:
        """:func:`clip` for a string, which may be huge (a repr): only the part that may be kept is encoded."""

        def encode(part: str) -> bytes:
            return part.encode("utf-8", "backslashreplace")

        chunk = 1 << 20
        size = (
            len(text) if text.isascii() else sum(len(encode(text[i : i + chunk])) for i in range(0, len(text), chunk))
        )
        keep = self.max_output + 1
        return clip(encode(text[-keep:] if tail else text[:keep]), size, self.max_output, self.room, tail)

    def python(self, code: str) -> str | None:
        """Run a cell; the value of a last bare expression is its result, as in a notebook."""
        self.cells += 1
        name = f"<cell {self.cells}>"
        linecache.cache[name] = (len(code), None, code.splitlines(True), name)
        tree = ast.parse(code, name)
        last = tree.body[-1] if tree.body else None
        if isinstance(last, ast.Expr):
            tree.body.pop()
        exec(compile(tree, name, "exec"), self.namespace)
        if not isinstance(last, ast.Expr):
            return None
        value = eval(compile(ast.Expression(last.value), name, "eval"), self.namespace)
        return None if value is None else repr(value)


def user_traceback(exc: BaseException) -> str:
    """The traceback without the kernel's own frames: what the model's code did."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename != __file__]
    head = "Traceback (most recent call last):\n" if frames else ""
    return head + "".join(traceback.format_list(frames)) + "".join(traceback.format_exception_only(type(exc), exc))


def main() -> None:
    spec = json.loads(sys.argv[1])
    req, resp = os.dup(0), os.dup(1)
    os.set_inheritable(req, False)
    os.set_inheritable(resp, False)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past RLIMIT_FSIZE fails instead of killing
    try:
        confine(spec, req, resp)
        kernel = Kernel(spec["max_output_bytes"], spec["max_message_bytes"])
    except Exception as exc:
        send(resp, {"fatal": f"{type(exc).__name__}: {exc}"})
        raise SystemExit(1) from None
    send(resp, {"ready": os.getpid(), "uid": os.getuid()})
    while (request := receive(req)) is not None:
        send(resp, kernel.call(request))


if __name__ == "__main__":
    main()
