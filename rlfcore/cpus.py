"""How torch's CPU threads wait and how many there are, on cores that other work may share.

torch runs its CPU ops on one OpenMP thread per core, and by libgomp's default a thread that finishes
its share of an op first spins (up to 300,000 rounds) for the others. When other work holds a core,
the thread it waits for is off the CPU, so each of a small model's many ops can cost a scheduler time
slice: the embedded default's SFT ran 10x slower on a busy 2-core machine. A passive wait (a waiting
thread sleeps at once) fixes that but costs a wake-up per op on a quiet machine: decoding
SmolLM2-135M, 206-215 tokens/s against the default's 267-270. A short spin, then sleep, keeps most of
both: ``benchmarks/threads_busy.py`` measures the three.

OpenMP reads these settings once, when torch loads it, so :func:`apply` runs at ``rlf``'s start,
before anything imports torch; they are environment variables, so the processes rlf starts inherit
them. A variable the user has set is left as it is.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, MutableMapping
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")


def affinity_cpus() -> int:
    """The cores this process may run on (OpenMP starts one thread per each)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS and Windows have no affinity call
        return os.cpu_count() or 1


def available_cpus(cgroup: Path = CGROUP) -> int:
    """The CPUs this process may use: its cores, capped by a cgroup CPU quota (a container's
    ``--cpus``), which OpenMP does not see."""
    cpus = affinity_cpus()
    quota = cpu_quota(cgroup)
    return max(1, min(cpus, math.ceil(quota))) if quota is not None else cpus


def cpu_quota(cgroup: Path = CGROUP) -> float | None:
    """CPUs' worth of time the cgroup at ``cgroup`` (a container's own) allows per period (v2
    ``cpu.max``, or v1's CFS quota); None without a quota or where there is no cgroup file to read."""
    try:
        quota, period = (cgroup / "cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        try:
            quota = (cgroup / "cpu" / "cpu.cfs_quota_us").read_text().strip()
            period = (cgroup / "cpu" / "cpu.cfs_period_us").read_text().strip()
        except OSError:
            return None
    if quota in ("max", "-1"):
        return None
    try:
        value = int(quota) / int(period)
    except (ValueError, ZeroDivisionError):
        return None
    return value if value > 0 else None


SPIN_ROUNDS = "1000"
"""``GOMP_SPINCOUNT``: the rounds a waiting thread spins before it sleeps (libgomp, which torch's
Linux wheels use). On the busy 2-core machine, as fast as a passive wait; quiet, within 10-20% of the
default's spinning where a passive wait was 50-90% slower (``benchmarks/threads_busy.py``)."""


def openmp_defaults(environ: Mapping[str, str], cpus: int, visible: int) -> dict[str, str]:
    """The OpenMP variables to set: a short spin before a thread sleeps, unless the user chose a wait
    policy or spin count; a thread count of ``cpus`` where fewer than the ``visible`` cores may run
    this process, unless the user chose one."""
    out: dict[str, str] = {}
    if "OMP_WAIT_POLICY" not in environ and "GOMP_SPINCOUNT" not in environ:
        out["GOMP_SPINCOUNT"] = SPIN_ROUNDS
    if "OMP_NUM_THREADS" not in environ and cpus < visible:
        out["OMP_NUM_THREADS"] = str(cpus)
    return out


def apply(environ: MutableMapping[str, str] = os.environ) -> dict[str, str]:
    """Set :func:`openmp_defaults` in ``environ`` (before torch loads); returns what it set."""
    chosen = openmp_defaults(environ, available_cpus(), affinity_cpus())
    environ.update(chosen)
    return chosen
