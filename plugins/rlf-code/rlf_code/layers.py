"""Which confinement layers this machine allows, found once per process: a sandbox uses all of them."""

from __future__ import annotations

import functools
import logging
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("rlf_code")
CGROUP_V1 = Path("/sys/fs/cgroup")
PROBE = (
    "import ctypes; libc = ctypes.CDLL(None, use_errno=True); "
    "raise SystemExit(libc.unshare(0x00020000 | 0x20000000 | 0x40000000))"
)


@dataclass(frozen=True)
class Layers:
    """The confinement a sandbox gets. Always: its own session and process group, rlimits on CPU,
    memory, file size and open files, a working directory of its own, a scrubbed environment, a
    wall-clock limit per call that kills its process group, output cut."""

    own_uid: bool
    """Runs as a uid of its own (root only): NPROC binds, file permissions bind, no signals to others,
    and a kill reaches the children that left its process group (``setsid``)."""
    namespaces: bool
    """New mount, pid and network namespaces: private tmpfs /tmp, /var/tmp, /dev/shm; its own /proc;
    pid 1 of its own, so nothing outlives it; no network but a loopback of its own that is down."""
    cgroups: bool
    """cgroup v1 memory and pids limits over all its processes together."""

    def describe(self, network: bool) -> str:
        active = ["process group", "rlimits", "own workdir", "scrubbed environment", "call timeout"]
        missing: list[str] = []
        for on, name in (
            (self.own_uid, "own uid (process limit, kill of setsid children)"),
            (self.namespaces, "mount+pid namespaces"),
            (self.namespaces and not network, "no network"),
            (self.cgroups, "cgroups (memory, pids)"),
        ):
            (active if on else missing).append(name)
        return f"active: {', '.join(active)}; missing: {', '.join(missing) or 'none'}"


@functools.cache
def detect(python: str = sys.executable) -> Layers:
    """The layers available here, logged once as a warning when some are missing."""
    root = os.geteuid() == 0
    namespaces = root and subprocess.run([python, "-I", "-S", "-c", PROBE], check=False).returncode == 0
    cgroups = root and all(os.access(CGROUP_V1 / c, os.W_OK) for c in ("memory", "pids"))
    layers = Layers(own_uid=root, namespaces=namespaces, cgroups=cgroups)
    if not (root and namespaces and cgroups):
        log.warning("rlf-code sandbox: %s (run as root on Linux for all layers)", layers.describe(network=False))
    else:
        log.info("rlf-code sandbox: %s", layers.describe(network=False))
    return layers
