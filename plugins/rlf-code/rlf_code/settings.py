"""The ``code:`` section of a run config: the sandbox's limits, its tools and how answers are checked."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

MB = 1024 * 1024


class Limits(BaseModel):
    """What one sandbox may use. The rlimits bind each of its processes; ``memory_mb`` and
    ``processes`` also bind them together through cgroups where those are available."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    call_timeout_s: float = Field(
        10.0, gt=0, description="Wall-clock limit of one call; past it the sandbox is killed."
    )
    cpu_s: int = Field(60, ge=1, description="CPU seconds each sandbox process may use in all (RLIMIT_CPU).")
    memory_mb: int = Field(1024, ge=64, description="Address space of each process (RLIMIT_AS) and of all together.")
    file_size_mb: int = Field(16, ge=1, description="Largest file a sandbox may write (RLIMIT_FSIZE).")
    disk_mb: int = Field(64, ge=1, description="Size of its private /tmp, /var/tmp and /dev/shm (tmpfs).")
    open_files: int = Field(64, ge=16, description="Open file descriptors per process (RLIMIT_NOFILE).")
    processes: int = Field(32, ge=4, description="Processes of the sandbox's uid (RLIMIT_NPROC, cgroup pids.max).")
    max_output_bytes: int = Field(
        8192, ge=256, description="Bytes of stdout, stderr, result or error shown; the rest is cut."
    )
    start_timeout_s: float = Field(10.0, gt=0, description="Time a new sandbox may take to start.")


class Settings(BaseModel):
    """Every setting has a default, so ``plugins: [code]`` alone runs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    limits: Limits = Field(default_factory=Limits)
    python: str | None = Field(None, description="Interpreter inside the sandbox; default: the one running rlf.")
    bash_tool: bool = Field(False, description="Also offer a `bash` tool, run in the same sandbox.")
    pool_size: int = Field(
        4, ge=0, description="Sandboxes kept started, so a trajectory's first call costs milliseconds."
    )
    uid_base: int = Field(
        200_000, ge=1000, description="As root, each sandbox runs as its own uid from here on (none needs to exist)."
    )
    uid_count: int = Field(4096, ge=1, description="How many uids from `uid_base` sandboxes may take.")
    network: bool = Field(False, description="Leave the network reachable (no network namespace).")
    verify_timeout_s: float = Field(20.0, gt=0, description="Wall-clock limit of running one sample's tests.")
    answer: Literal["code_block", "answer_tag"] = Field(
        "code_block", description="Where the final answer is: the last ```python block, or <answer>...</answer>."
    )
