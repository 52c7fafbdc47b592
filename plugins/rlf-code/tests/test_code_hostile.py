"""Hostile code: each attack is stopped, reported to the model as an error, and leaves nothing behind
(no process of the sandbox's uid, no file, no port), while the host and another session go on.

These run only where every layer is active (root on Linux); the limits are small (conftest's SMALL)."""

from __future__ import annotations

import os
import shutil
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from code_sandbox_support import SMALL, full, layers  # noqa: F401 (fixtures)
from rlf_code.layers import Layers
from rlf_code.sandbox import Output, Sandbox, processes_of


@pytest.fixture
def box(full: Layers) -> Iterator[Sandbox]:
    sandbox = Sandbox(SMALL, full).start()
    yield sandbox
    uid = sandbox.uid
    sandbox.close()
    assert uid is not None and processes_of(uid) == [], "a process of the sandbox's uid outlived it"


@pytest.fixture
def bystander(full: Layers) -> Iterator[Sandbox]:
    """Another trajectory's sandbox, with state that must survive its neighbour's attack."""
    other = Sandbox(SMALL, full).start()
    assert other.call("kept = 'mine'").ok
    yield other
    assert other.call("kept").result == "'mine'"
    other.close()


def failed(out: Output) -> str:
    assert not out.ok, f"the attack was not reported as an error: {out.render()}"
    return out.error or ""


@pytest.mark.usefixtures("bystander")
def test_fork_bomb_hits_the_process_limit(box: Sandbox) -> None:
    error = failed(box.call("import os\nwhile True:\n    os.fork()"))
    assert "Resource temporarily unavailable" in error or "past its" in error
    assert len(processes_of(box.uid or -1)) <= SMALL.processes


def test_spawning_stops_at_the_process_limit(box: Sandbox) -> None:
    """The harmless probe first: 100 sleeps, of which only the limit's worth start."""
    out = box.call("import subprocess\nps = []\nfor i in range(100):\n    ps.append(subprocess.Popen(['sleep', '30']))")
    assert "BlockingIOError" in failed(out)
    assert len(processes_of(box.uid or -1)) <= SMALL.processes


@pytest.mark.usefixtures("bystander")
def test_memory_bomb_is_a_memory_error(box: Sandbox) -> None:
    assert "MemoryError" in failed(box.call("x = []\nwhile True:\n    x.append(bytearray(2**24))"))
    assert box.call("del x; 1").result == "1"  # the interpreter survives its own MemoryError


def test_forked_memory_bomb_is_held_by_the_cgroup(box: Sandbox) -> None:
    code = "import os\nfor _ in range(8):\n    if os.fork() == 0:\n        b = bytearray(400 * 2**20)\n        os._exit(0)\nos.wait()\n1/0"
    failed(box.call(code))


def test_endless_loop_is_stopped_at_the_call_limit(box: Sandbox) -> None:
    assert box.call("while True: pass").failure == "timeout"


def test_a_gigabyte_of_output_is_cut(box: Sandbox) -> None:
    assert "MemoryError" in failed(box.call("print('x' * 2**30)"))
    out = box.call("for _ in range(1024):\n    print('x' * 2**20)")
    assert "File too large" in failed(out) and "more bytes cut]" in out.stdout
    assert len(out.stdout) < 2 * SMALL.max_output_bytes


def test_no_writes_outside_the_sandbox(box: Sandbox, tmp_path: Path) -> None:
    target = Path.cwd() / "rlf-code-escape"  # the trainer's own folder: read-only, or hidden under a private /tmp
    refused = failed(box.call(f"open({str(target)!r}, 'w')"))
    assert "Permission denied" in refused or ("No such file" in refused and Path.cwd().is_relative_to("/tmp"))
    assert "Permission denied" in failed(box.call("open('/etc/rlf-code-escape', 'w')"))  # the host's own folders
    assert box.call("open('/var/tmp/rlf-code-escape', 'w').write('x')").ok  # world-writable: a private tmpfs
    assert not Path("/etc/rlf-code-escape").exists() and not Path("/var/tmp/rlf-code-escape").exists()
    assert "denied" in failed(box.call("open('/proc/sys/kernel/hostname', 'w').write('x')"))
    assert box.call(f"open({str(tmp_path / 'x')!r}, 'w').write('x')").error  # the host's /tmp is not there
    assert box.call("open('/tmp/inside', 'w').write('x')").ok  # its own /tmp is private
    assert not target.exists() and not (tmp_path / "x").exists() and not Path("/tmp/inside").exists()


def test_the_trainers_files_and_environment_are_out_of_reach(box: Sandbox) -> None:
    home = Path.home() / ".cache" / "rlf-code-secret"
    home.parent.mkdir(parents=True, exist_ok=True)
    home.write_text("hunter2")
    try:
        assert "FileNotFoundError" in failed(box.call(f"open({str(home)!r}).read()"))
    finally:
        home.unlink()
    out = box.call(f"open('/proc/{os.getpid()}/environ').read()")
    assert "hunter2" not in out.render() and not out.ok  # the host's pids are not in its /proc
    assert box.call("import os; len([p for p in os.listdir('/proc') if p.isdigit()])").result == "2"


def test_no_network_not_even_the_hosts_loopback(box: Sandbox) -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        error = failed(box.call(f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2)"))
    assert "Network is unreachable" in error or "Connection refused" in error


@pytest.mark.usefixtures("bystander")
def test_killing_its_parent_ends_only_the_sandbox(box: Sandbox) -> None:
    assert "ProcessLookupError" in failed(box.call(f"import os; os.kill({os.getpid()}, 9)"))  # the host is not there
    out = box.call("import os, signal, time; os.kill(os.getppid(), signal.SIGKILL); time.sleep(0.2); os.getppid()")
    assert out.result == "1"  # its parent is its namespace's init, which its own processes cannot kill
    out = box.call("import os; os.kill(os.getpid(), 9)")
    assert out.failure == "crash" and out.error and out.error.startswith("the interpreter was killed by SIGKILL")


def test_daemons_and_zombies_die_with_it(full: Layers) -> None:
    sandbox = Sandbox(SMALL, full).start()
    code = (
        "import os, subprocess\n"
        "subprocess.Popen(['sleep', '300'], start_new_session=True)\n"
        "if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        import time; time.sleep(300)\n    os._exit(0)\n"
        "if os.fork() == 0:\n    os._exit(0)\n"  # a zombie: never waited for
    )
    assert sandbox.call(code).ok
    uid = sandbox.uid or -1
    assert len(processes_of(uid)) >= 4
    sandbox.close()
    assert processes_of(uid) == []


def test_rlimits_cannot_be_raised_back(box: Sandbox) -> None:
    error = failed(box.call("import resource; resource.setrlimit(resource.RLIMIT_NPROC, (10**6, 10**6))"))
    assert "not allowed to raise maximum limit" in error


def test_filling_the_disk_stops_at_its_private_quota(box: Sandbox) -> None:
    free = shutil.disk_usage("/").free
    code = "i = 0\nwhile True:\n    open(f'/tmp/fill{i}', 'wb').write(b'x' * 2**22)\n    i += 1"
    assert "No space left on device" in failed(box.call(code))
    assert abs(shutil.disk_usage("/").free - free) < 64 * 2**20


def test_sessions_cannot_see_or_signal_each_other(box: Sandbox, bystander: Sandbox) -> None:
    pid = bystander._proc.pid  # type: ignore[union-attr]
    assert "ProcessLookupError" in failed(box.call(f"import os; os.kill({pid}, 9)"))
    box.call("import os, signal; os.kill(-1, signal.SIGKILL)")  # everything it may signal: its own processes


def test_threads_of_the_host_are_unaffected(box: Sandbox) -> None:
    before = threading.active_count()
    box.call("while True: pass")
    assert threading.active_count() == before
