"""The "before" of the hostile tests: with the uid, namespace and cgroup layers off, as root, what the
same code does. Only what is safe to let through on a shared machine is tried here; each assertion
is the opposite of one in test_code_hostile.py, which proves that layer is what stops it."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from code_sandbox_support import SMALL, full, layers  # noqa: F401 (fixtures)
from rlf_code.layers import Layers
from rlf_code.sandbox import Sandbox

BARE = Layers(own_uid=False, namespaces=False, cgroups=False)


@pytest.fixture
def bare(full: Layers) -> Iterator[Sandbox]:  # noqa: ARG001 - full skips where a layer is missing
    sandbox = Sandbox(SMALL, BARE).start()
    yield sandbox
    sandbox.close()


def test_as_root_the_process_limit_does_not_bind(bare: Sandbox) -> None:
    spawn = "import subprocess\nps = [subprocess.Popen(['sleep', '30']) for _ in range(100)]\n[p.pid for p in ps]"
    out = bare.call(spawn, timeout_s=30)  # 100 starts can take seconds on a loaded machine
    pids = eval(out.result or "[]")
    assert len(pids) == 100  # RLIMIT_NPROC is 32, but root is exempt: hence a uid of its own
    bare.close()
    assert not [p for p in pids if Path(f"/proc/{p}").exists() and "sleep" in Path(f"/proc/{p}/cmdline").read_text()]


def test_without_namespaces_the_hosts_loopback_and_files_are_reachable(bare: Sandbox, tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("hunter2")
    secret.chmod(0o600)
    assert bare.call(f"open({str(secret)!r}).read()").result == "'hunter2'"
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        assert bare.call(f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2); 'open'").ok
    assert bare.call(f"len(open('/proc/{os.getpid()}/environ').read()) > 0").result == "True"
