"""``rlf train CONFIG --backend verl``: convert the data, build and validate verl's config, start verl.

The run folder gets ``verl/train.parquet`` (and ``val.parquet``), ``verl/overrides.txt`` (the exact
Hydra overrides) and ``verl/config.yaml`` (verl's composed config); verl's file logger writes
``verl_metrics.jsonl``, which ``rlf ui`` reads, and a run that ends well ``summary.json``
(:mod:`.summary`), which marks it finished there. The launch itself is verl's own
``python -m verl.trainer.main_ppo`` with those overrides, so what runs is plain verl.
"""

from __future__ import annotations

import json
import logging
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rlfcore.backends.verl import summary
from rlfcore.backends.verl.hydra import (
    ONE_STEP_OFF,
    Cluster,
    TranslationError,
    compose,
    entry,
    notices,
    validate,
    verl_overrides,
    verl_root,
)

if TYPE_CHECKING:
    from omegaconf import DictConfig


log = logging.getLogger("rlfcore.verl")


@dataclass
class Plan:
    """Everything a verl run needs, checked by verl: its overrides, composed config and files."""

    overrides: list[str]
    config: DictConfig
    train_file: Path
    val_file: Path | None
    run_dir: Path
    notices: list[str]
    sft_model: Path | None
    """Where rlf's SFT warm start writes the model verl starts from (``sft.data`` set), else None."""

    def yaml(self) -> str:
        from omegaconf import OmegaConf

        return OmegaConf.to_yaml(self.config)


def require_verl() -> None:
    """Fail early, naming the fix, when verl is missing; warn when it is not the tested release."""
    from rlfcore.backends.verl import VERL_VERSION

    try:
        import verl
    except ImportError as exc:
        raise RuntimeError(f"the verl backend needs verl {VERL_VERSION}: pip install 'rlfcore[verl]' ({exc})") from None
    if getattr(verl, "__version__", None) != VERL_VERSION:
        log.warning("verl %s is installed; rlf's verl backend is tested with %s", verl.__version__, VERL_VERSION)


def sft_model_path(run_dir: str | Path, lora: bool = False) -> Path:
    """The model verl starts from after rlf's SFT warm start: ``rlf sft``'s model folder or, when
    ``trainer.lora`` made that folder an adapter alone, the adapter folded into its base beside it
    (verl loads a whole model, and trains adapters of its own on it)."""
    return Path(run_dir).resolve() / "checkpoints" / "sft" / ("merged" if lora else "model")


def prepare(
    config_path: str | Path,
    overrides: list[str],
    raw_overrides: list[str],
    run_dir: str | Path,
    cluster: Cluster | None = None,
    resume: bool = False,
) -> Plan:
    """Convert the data into ``run_dir/verl``, translate the config, append ``raw_overrides``, validate.

    Raises ConfigError, DataError or TranslationError naming what is wrong; starts nothing.
    """
    require_verl()
    from rlfcore.backends.verl.convert import write_parquet
    from rlfcore.config import load_config
    from rlfcore.data import read_rows, training_rows
    from rlfcore.runtime import Runtime

    config, manager = load_config(config_path, overrides)
    runtime = Runtime(config, manager)  # routing only: no plugin setup, no servers
    if not config.data.train:
        raise ValueError("the config names no training data: set data.train")
    out = Path(run_dir) / "verl"
    rows = training_rows(read_rows(config.path(config.data.train)), config)  # less data.difficulty's drops
    train_file = write_parquet(rows, out / "train.parquet", runtime)
    val_file = None
    if config.data.eval:
        val_file = write_parquet(read_rows(config.path(config.data.eval)), out / "val.parquet", runtime)
    sft_model = sft_model_path(run_dir, config.trainer.lora is not None) if config.sft.data else None
    translated = verl_overrides(
        config, config_path, train_file, val_file, overrides, run_dir, cluster, sft_model, resume
    )
    all_overrides = translated + list(raw_overrides)
    cfg = compose(all_overrides)
    validate(cfg)
    plan = Plan(all_overrides, cfg, train_file, val_file, Path(run_dir), notices(config), sft_model)
    (out / "overrides.txt").write_text("\n".join(all_overrides) + "\n")
    (out / "config.yaml").write_text(plan.yaml())
    return plan


def make_model(config_path: str | Path, overrides: list[str], plan: Plan, resume: bool) -> None:
    """Make the model verl starts from, when rlf has to: its SFT warm start (``sft.data``, run here
    with rlf's own trainer, as the local backend runs it before GRPO), or ``model.init``'s tiny model.
    A resumed run keeps the warm start it already has."""
    from rlfcore.backends.local.model import ensure_model, tool_schemas
    from rlfcore.backends.local.run import sft_only
    from rlfcore.config import load_config
    from rlfcore.runtime import Runtime

    config, manager = load_config(config_path, overrides)
    if plan.sft_model is not None:
        if resume and (plan.sft_model / "config.json").exists():
            return
        trained = Path(sft_only(config, manager, plan.run_dir)["model"])
        if config.trainer.lora is not None:  # an adapter alone: verl gets it folded into its base
            from rlfcore.backends.local.lora import merge

            shutil.rmtree(plan.sft_model, ignore_errors=True)  # a fresh warm start replaces an older fold
            merge(trained, plan.sft_model)
        return
    if config.model.init is None:
        return
    runtime = Runtime.open(config, manager)
    try:
        ensure_model(config, config.base_dir, tool_schemas(runtime))
    finally:
        runtime.close()


def clear_records(run_dir: str | Path, resume: bool) -> None:
    """Remove rlf's per-sample records (``samples/step_N.jsonl``) of the steps verl is about to run:
    every one for a fresh run, those past verl's latest checkpoint for ``--resume``. The reward
    function appends to them, so each file then holds one attempt at its step, as verl's own dumps
    (rewritten each time) do."""
    run = Path(run_dir)
    kept = _kept_step(run, resume)
    for path in (run / "samples").glob("step_*.jsonl"):
        step = path.stem.removeprefix("step_")
        if not step.isdigit() or int(step) > kept:
            path.unlink()


def metrics_file(plan: Plan) -> str | None:
    """Where verl's file logger writes this run's metrics, when it is on and pointed by rlf."""
    from omegaconf import OmegaConf

    from rlfcore.backends.verl.hydra import METRICS_ENV

    path = OmegaConf.select(plan.config, f"ray_kwargs.ray_init.runtime_env.env_vars.{METRICS_ENV}")
    return str(path) if path and "file" in plan.config.trainer.logger else None


def _kept_step(run: Path, resume: bool) -> int:
    """The step verl continues after: its latest checkpoint's for ``--resume``, else 0."""
    marker = run / "checkpoints" / "latest_checkpointed_iteration.txt"
    return int(marker.read_text().strip()) if resume and marker.exists() else 0


def keep_metrics(run_dir: str | Path, resume: bool) -> None:
    """Set aside the metrics of the steps a ``--resume`` keeps: verl's file logger truncates
    ``verl_metrics.jsonl`` when it starts, so the lines up to the latest checkpoint move to
    ``verl_metrics.earlier.jsonl``, which ``rlf ui`` reads first. A fresh run drops both."""
    from rlfcore.backends.verl import EARLIER_METRICS_FILE, METRICS_FILE

    run = Path(run_dir)
    current, earlier = run / METRICS_FILE, run / EARLIER_METRICS_FILE
    kept = _kept_step(run, resume)
    lines = []
    for path in (earlier, current) if kept else ():
        for line in path.read_bytes().splitlines() if path.exists() else ():
            try:
                step = json.loads(line).get("step")
            except (ValueError, AttributeError):
                continue
            if isinstance(step, int) and step <= kept:
                lines.append(line + b"\n")
    if lines:
        tmp = earlier.with_suffix(".tmp")
        tmp.write_bytes(b"".join(lines))
        tmp.replace(earlier)
    else:
        earlier.unlink(missing_ok=True)
    current.unlink(missing_ok=True)


def command(plan: Plan) -> list[str]:
    """verl's trainer entry with the plan's overrides: the command :func:`launch` runs."""
    return [sys.executable, "-m", entry(plan.config), *plan.overrides]


def launch(plan: Plan) -> int:
    """Run verl's trainer to the end; returns its exit code. The one-step-off trainer runs from verl's
    own folder (:func:`~rlfcore.backends.verl.hydra.verl_root`)."""
    if entry(plan.config) != ONE_STEP_OFF:
        return subprocess.call(command(plan))
    import torch

    if not torch.cuda.is_available():
        # verl 0.9.1 moves weights to a standalone rollout pool only through a checkpoint engine of
        # nccl, hccl, nixl, mooncake or kimi; "naive", the one without GPUs, serves colocated rollouts.
        raise TranslationError(
            "trainer.max_staleness: verl's one-step-off trainer needs GPUs: it moves weights to its rollout "
            "pool through NCCL (verl has no CPU checkpoint engine for a separate pool); --dry-run shows its "
            "config, and the local backend trains asynchronously on a CPU"
        )
    return subprocess.call(command(plan), cwd=verl_root())


def report(plan: Plan, echo: Callable[[str], None] = print) -> None:
    """The plan's notices: local-only settings verl ignores, the SFT warm start, where metrics go."""
    for line in plan.notices:
        echo(f"# {line}")
    if plan.sft_model is not None:
        echo(f"# sft.data is set: rlf's SFT warm start runs first, here; verl trains from {plan.sft_model}")
    metrics = metrics_file(plan)
    if metrics is not None:
        echo(f"# verl's file logger writes each step's metrics to {metrics}; rlf ui draws them")


def dry_run(plan: Plan, echo: Callable[[str], None] = print) -> int:
    """Print verl's validated config and the command that would launch it; launch nothing."""
    report(plan, echo)
    echo(plan.yaml())
    echo(f"# verl config validated; data written to {_files(plan)}")
    echo(f"# dry run: nothing launched. to launch it by hand: {shlex.join(command(plan))}")
    return 0


def start(
    config_path: str | Path, overrides: list[str], plan: Plan, resume: bool, echo: Callable[[str], None] = print
) -> int:
    """Make the model (SFT warm start or ``model.init``), set the run folder's records and metrics
    for a fresh or resumed run, and launch verl; returns verl's exit code."""
    report(plan, echo)
    began = time.perf_counter()
    summary.clear(plan.run_dir)
    make_model(config_path, overrides, plan, resume)
    clear_records(plan.run_dir, resume)
    keep_metrics(plan.run_dir, resume)
    echo(f"verl data: {_files(plan)}; config: {plan.run_dir / 'verl' / 'config.yaml'}")
    code = launch(plan)
    if code == 0:  # rlf ui shows the run finished; a failed or stopped run keeps no summary
        summary.write(plan.run_dir, time.perf_counter() - began)
    return code


def _files(plan: Plan) -> str:
    return ", ".join(str(p) for p in (plan.train_file, plan.val_file) if p is not None)
