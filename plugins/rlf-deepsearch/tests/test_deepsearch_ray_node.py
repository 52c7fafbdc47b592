"""Under real Ray (as under the verl backend, where every rollout worker is a Ray actor), the default
``share: auto`` gives one retrieval server per node: the first actor to search starts it, every
actor is a client of that one server, and when the actors leave the last one stops it."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

ray = pytest.importorskip("ray")

if TYPE_CHECKING:
    from rlf_deepsearch.search import RunSearcher

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray")]  # the suite's Ray tests share a test process

ACTORS = 3


class Worker:
    """What a rollout worker's run does with deepsearch: open the run's searcher (as the plugin's
    ``register_tools`` does), search through it, and close it in ``shutdown``."""

    def __init__(self) -> None:
        self.run: RunSearcher | None = None

    def search(self, index_dir: str) -> dict:
        from rlf_deepsearch.search import open_searcher
        from rlf_deepsearch.settings import Settings

        self.run = open_searcher(Settings(index_dir=index_dir), Path(index_dir))
        hits = self.run.search("red planet", 1)
        return {"pid": os.getpid(), "url": self.run.searcher.url, "title": hits[0].title}

    def leave(self) -> None:
        assert self.run is not None
        self.run.close()
        self.run = None


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][:1] == "Z"


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not _gone(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_ray_actors_share_one_node_server_and_the_last_one_stops_it(tmp_path: Path) -> None:
    index_dir = tmp_path / "index"
    ray_temp = tempfile.mkdtemp(prefix="rlfray", dir="/tmp")  # short: Ray's socket paths
    ray.init(
        num_cpus=ACTORS,
        include_dashboard=False,
        _temp_dir=ray_temp,
        # the actors import Worker from this module
        runtime_env={"env_vars": {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).parent)}},
    )
    try:
        actors = [ray.remote(num_cpus=1)(Worker).remote() for _ in range(ACTORS)]
        found = ray.get([a.search.remote(str(index_dir)) for a in actors], timeout=600)
        assert {f["title"] for f in found} == {"Mars"}
        assert len({f["url"] for f in found}) == 1, found  # one server for the node
        assert len({f["pid"] for f in found}) == ACTORS  # searched from 3 processes
        [state] = (index_dir / "servers").glob("*.json")
        info = json.loads(state.read_text())
        assert sorted(info["clients"]) == sorted(f["pid"] for f in found)  # every actor is a client
        assert info["pid"] not in info["clients"]
        ray.get([a.leave.remote() for a in actors[:-1]], timeout=60)
        assert not _gone(info["pid"]) and json.loads(state.read_text())["clients"] == [found[-1]["pid"]]
        ray.get(actors[-1].leave.remote(), timeout=60)  # the last client out stops the server
        assert not state.exists()
        assert _gone_within(info["pid"], 30.0)  # stopped with SIGTERM, not waited for
    finally:
        ray.shutdown()
        shutil.rmtree(ray_temp, ignore_errors=True)
