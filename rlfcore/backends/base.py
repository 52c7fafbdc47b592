"""The one seam every training backend sits behind: ``prepare`` a request, then ``run``, ``resume``
or ``dry_run`` it.

``rlf train`` picks a backend by name and calls these four, nothing else, so a backend that cannot
honour an option says so in :meth:`Backend.prepare`, naming it, instead of the command branching
per backend or an option being silently ignored.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from rlfcore.plugins import PluginManager
    from rlfcore.schema import RunConfig

Progress = Callable[[str, dict[str, Any]], None]
"""Called as ``(phase, metrics)`` after every step of a backend that reports them (``sft``, ``grpo``)."""


class BackendError(ValueError):
    """A backend cannot honour an option or setting; the message names it and what to do instead."""


@dataclass(frozen=True)
class ClusterOptions:
    """Where a run trains, as ``rlf train``'s options give it; the defaults mean one process, one device."""

    gpus_per_node: int = 1
    nodes: int = 1
    ray_address: str | None = None
    rollout: str = "vllm"
    tensor_parallel: int = 1

    def set_options(self) -> dict[str, object]:
        """The options given away from their defaults, as the command line names them."""
        default = ClusterOptions()
        names = {
            "gpus_per_node": "--gpus",
            "nodes": "--nodes",
            "ray_address": "--ray-address",
            "rollout": "--rollout",
            "tensor_parallel": "--tp",
        }
        return {flag: getattr(self, key) for key, flag in names.items() if getattr(self, key) != getattr(default, key)}


@dataclass(frozen=True)
class TrainRequest:
    """What ``rlf train`` was asked: the config, its overrides, the run folder and the cluster options."""

    config_path: str
    run_dir: Path
    overrides: list[str] = field(default_factory=list)
    raw_overrides: list[str] = field(default_factory=list)
    """Anything after ``--`` on the command line: the backend's own settings, passed to it untouched."""
    resume: bool = False
    """Continue the run in ``run_dir`` (:meth:`Backend.resume`) rather than start one."""
    resume_from: Path | None = None
    """A checkpoint to resume from instead of the run's last one."""
    allow_config_change: bool = False
    """Resume even where the config changes what the run's record means (``--allow-config-change``)."""
    cluster: ClusterOptions = field(default_factory=ClusterOptions)


@dataclass
class TrainJob:
    """What :meth:`Backend.prepare` checked and made ready: the request, the validated config and its
    plugins, and the backend's own plan (verl's translated config), if it makes one."""

    request: TrainRequest
    config: RunConfig
    manager: PluginManager
    plan: Any = None


@dataclass
class Outcome:
    """How a run ended: its exit code and, when the backend writes one, its summary."""

    exit_code: int = 0
    summary: dict[str, Any] | None = None


class Backend(ABC):
    """A way to train. Subclasses set :attr:`name` and implement the four entry points."""

    name: ClassVar[str]

    @abstractmethod
    def prepare(self, request: TrainRequest) -> TrainJob:
        """Load and check everything the run needs, refusing (:class:`BackendError`, or a
        ``ConfigError`` naming the setting) what this backend cannot honour; start nothing."""

    @abstractmethod
    def run(self, job: TrainJob, progress: Progress | None = None) -> Outcome:
        """Train from the start; the run folder must not hold another run."""

    @abstractmethod
    def resume(self, job: TrainJob, progress: Progress | None = None) -> Outcome:
        """Continue the run in the job's folder from its last checkpoint (or ``resume_from``)."""

    @abstractmethod
    def dry_run(self, job: TrainJob, echo: Callable[[str], None] = print) -> Outcome:
        """Say what :meth:`run` would do, through ``echo``; train nothing."""


def refuse(backend: str, options: Mapping[str, object], why: str, instead: str) -> None:
    """A :class:`BackendError` naming each option of ``options`` the backend cannot honour."""
    if options:
        named = ", ".join(f"{k} {v}" if v is not True else k for k, v in options.items())
        raise BackendError(f"the {backend} backend {why}: {named} {instead}")
