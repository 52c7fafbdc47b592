"""Experiment trackers (``trainer.loggers``): every step's metrics also go to TensorBoard, W&B, MLflow
or Trackio, beside the run folder's ``metrics.jsonl``, which stays the record.

Each tracker is its library's own client, imported only when named. A tracker named but not installed
is a config error at ``trainer.loggers[i]`` naming the package to install, found when the config is
checked, before anything runs. A tracker that fails while a run logs (a server gone) is warned about
once and dropped; the run goes on. Where each writes:

- ``tensorboard``: event files in ``RUN/tensorboard`` (torch's ``SummaryWriter``).
- ``wandb``: a run in W&B project ``trainer.project``, named after the run folder, its files under
  ``RUN/wandb``; ``WANDB_MODE=offline`` keeps it there (``wandb sync`` uploads it later).
- ``mlflow``: experiment ``trainer.project`` at ``MLFLOW_TRACKING_URI``, else in the local file store
  ``RUN/mlruns`` (``mlflow ui --backend-store-uri RUN/mlruns``).
- ``trackio``: project ``trainer.project`` in Trackio's local database (``TRACKIO_DIR``, default
  ``~/.cache/huggingface/trackio``; ``trackio show`` opens it).

SFT metrics are logged as ``sft/<name>`` on their own step axis, GRPO's under their own names. The
W&B and MLflow run ids are kept in ``RUN/trackers.json`` so ``--resume`` continues the same runs.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

TRACKERS: dict[str, tuple[str, str]] = {
    "tensorboard": ("tensorboard", "tensorboard"),
    "wandb": ("wandb", "wandb"),
    "mlflow": ("mlflow", "mlflow-skinny"),
    "trackio": ("trackio", "trackio"),
}
"""Each tracker's module and the PyPI package that provides it."""


def installed(module: str) -> bool:
    """Whether ``module`` can be imported, without importing it."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # ValueError: blocked in sys.modules
        return False


def missing_tracker(name: str) -> str | None:
    """Why tracker ``name`` cannot run (its package is not installed), else None."""
    module, package = TRACKERS[name]
    if installed(module):
        return None
    return f"tracker {name!r} needs the {package} package, which is not installed: pip install {package} (or pip install 'rlfcore[trackers]')"


class Tracker(Protocol):
    def log(self, metrics: dict[str, float], step: int, prefix: str) -> None: ...

    def close(self) -> None: ...


class TensorBoard:
    def __init__(self, run_path: Path):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(run_path / "tensorboard"))

    def log(self, metrics: dict[str, float], step: int, prefix: str) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(prefix + key, value, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandB:
    def __init__(self, run_path: Path, project: str, config: dict[str, Any], run_id: str | None):
        import wandb

        self.run = wandb.init(
            project=project,
            name=run_path.name,
            dir=str(run_path),
            config=config,
            id=run_id,
            resume="allow" if run_id else None,
        )
        self.id = self.run.id
        self.defined: set[str] = set()

    def log(self, metrics: dict[str, float], step: int, prefix: str) -> None:
        # W&B's own step only grows; each metric is plotted against its phase's step instead
        for key in metrics:
            if prefix + key not in self.defined:
                self.run.define_metric(prefix + key, step_metric=f"{prefix}step")
                self.defined.add(prefix + key)
        self.run.log({**{prefix + k: v for k, v in metrics.items()}, f"{prefix}step": step})

    def close(self) -> None:
        self.run.finish()


class MLflow:
    def __init__(self, run_path: Path, project: str, config: dict[str, Any], run_id: str | None):
        uri = os.environ.get("MLFLOW_TRACKING_URI")
        if not uri:  # mlflow-skinny has no database store; its file store must be asked for
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
            uri = (run_path / "mlruns").resolve().as_uri()
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=uri)
        if run_id is None:
            experiment = self.client.get_experiment_by_name(project)
            experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(project)
            run_id = self.client.create_run(experiment_id, run_name=run_path.name).info.run_id
            params = [Param(k, str(v)[:6000]) for k, v in _flat(config).items()]
            for i in range(0, len(params), 100):  # MLflow takes at most 100 params per batch
                self.client.log_batch(run_id, params=params[i : i + 100])
        self.id = run_id

    def log(self, metrics: dict[str, float], step: int, prefix: str) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.id, metrics=[Metric(prefix + k, v, now, step) for k, v in metrics.items()])

    def close(self) -> None:
        self.client.set_terminated(self.id)


class Trackio:
    def __init__(self, run_path: Path, project: str, config: dict[str, Any]):
        import trackio

        self.trackio = trackio
        trackio.init(project=project, name=run_path.name, config=config, resume="allow", embed=False)

    def log(self, metrics: dict[str, float], step: int, prefix: str) -> None:
        self.trackio.log({prefix + k: v for k, v in metrics.items()}, step=step)

    def close(self) -> None:
        self.trackio.finish()


class Trackers:
    """The run's trackers, fed by :meth:`~rlfcore.backends.local.rundir.RunDir.log`."""

    def __init__(self, trackers: dict[str, Tracker]):
        self.trackers = trackers

    @classmethod
    def open(cls, names: Sequence[str], run_path: Path, project: str, config: dict[str, Any]) -> Trackers:
        """Start each named tracker; ids kept in ``RUN/trackers.json`` resume the same W&B and MLflow runs."""
        ids_path = run_path / "trackers.json"
        ids: dict[str, str] = json.loads(ids_path.read_text()) if ids_path.exists() else {}
        trackers: dict[str, Tracker] = {}
        for name in dict.fromkeys(names):
            if name == "tensorboard":
                trackers[name] = TensorBoard(run_path)
            elif name == "wandb":
                trackers[name] = WandB(run_path, project, config, ids.get("wandb"))
            elif name == "mlflow":
                trackers[name] = MLflow(run_path, project, config, ids.get("mlflow"))
            else:
                trackers[name] = Trackio(run_path, project, config)
        kept = {n: t.id for n, t in trackers.items() if isinstance(t, (WandB, MLflow))}
        if kept:
            ids_path.write_text(json.dumps(kept))
        return cls(trackers)

    def log(self, metrics: dict[str, Any], step: int, prefix: str = "") -> None:
        """The numbers of ``metrics`` at ``step``; a tracker that raises is dropped with a warning."""
        numbers = {
            k: float(v)
            for k, v in metrics.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "step"
        }
        for name, tracker in list(self.trackers.items()):
            try:
                tracker.log(numbers, step, prefix)
            except Exception as exc:  # a tracker's outage must not stop training; metrics.jsonl has it all
                print(
                    f"warning: tracker {name} failed and is dropped for this run ({type(exc).__name__}: {exc}); "
                    "metrics.jsonl keeps every step",
                    file=sys.stderr,
                )
                del self.trackers[name]

    def close(self) -> None:
        """Finish every tracker's run; one that fails to is warned about, the others still finish."""
        for name, tracker in self.trackers.items():
            try:
                tracker.close()
            except Exception as exc:  # closing runs in a ``finally``: it must not hide the run's own error
                print(
                    f"warning: tracker {name} failed to finish its run ({type(exc).__name__}: {exc})", file=sys.stderr
                )
        self.trackers = {}


def _flat(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out
