"""``rlf train`` and ``rlf sft`` as functions: prepare the model and data, train, write the run folder."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rlfcore.backends.base import Progress
from rlfcore.backends.local.lock import RunDirError, RunLock
from rlfcore.backends.local.model import ensure_model, resolve, start_policy, tool_schemas
from rlfcore.backends.local.resume import check_resume_config, describe
from rlfcore.backends.local.rundir import RunDir
from rlfcore.data import read_rows, training_rows
from rlfcore.diagnostics import Advisor, config_warnings
from rlfcore.engines.chat import refuse_chat_engine
from rlfcore.paths import resolve_path
from rlfcore.plugins import PluginManager
from rlfcore.rundata.metrics import summarize
from rlfcore.runtime import Runtime
from rlfcore.schema import RunConfig
from rlfcore.signals import Interrupted


def check_run_dir(path: Path, resume: bool) -> None:
    """A :class:`RunDirError` when a fresh run would write over another one in ``path``."""
    if (
        not resume
        and path.exists()
        and any((path / f).exists() for f in ("metrics.jsonl", "sft_metrics.jsonl", "checkpoints"))
    ):
        raise RunDirError(f"{path} already holds a run: pass --resume to continue it, or choose another --run-dir")


@contextmanager
def open_run_dir(
    path: Path, config: RunConfig, resume: bool = False, allow_config_change: bool = False
) -> Iterator[RunDir]:
    """The run folder, held by this process until the block ends (:class:`RunLock`), with ``config``
    saved in it. Another process is refused, and so is a resume that changes the run's record, before
    anything is written; then what a killed run left half-written goes: partial checkpoint folders, and
    (resuming) a torn last line of the metrics."""
    path.mkdir(parents=True, exist_ok=True)
    with RunLock(path):
        check_run_dir(path, resume)
        notes = []
        if resume and (changes := check_resume_config(path, config, allow_config_change)):
            notes.append(("config", f"resuming {path} with a changed config: {describe(changes)}"))
        run_dir = RunDir(path)
        notes += [
            (str(p), f"removed {p}, a checkpoint a stopped run did not finish saving")
            for p in run_dir.clear_partial_checkpoints()
        ]
        if resume:
            (path / "summary.json").unlink(missing_ok=True)  # the run goes on: how it ended last is stale
            dropped = (run_dir.drop_torn_line(file) for file in ("metrics.jsonl", "sft_metrics.jsonl"))
            notes += [(note, note) for note in dropped if note is not None]
        Advisor()(notes)
        run_dir.save_config(config)
        yield run_dir


def check_model(config: RunConfig, base: Path) -> None:
    """A config error naming ``model.path`` unless it holds a model or ``model.init`` builds one;
    checked before the runtime starts plugins' servers."""
    from rlfcore.schema import ConfigError, ConfigIssue

    path = resolve(config.model.path, base)
    if path is None:
        problem = "not set: name the folder of a Hugging Face model (and set model.init to build a tiny one there)"
    elif not (path / "config.json").exists() and config.model.init is None:
        typed = Path(config.model.path or "").expanduser().is_absolute()
        where = "" if typed else " (read relative to the config's folder; one typed on the command line is not)"
        problem = f"{path} has no model, and model.init is not set to build one{where}"
    else:
        return
    raise ConfigError([ConfigIssue(path="model.path", message=problem)], source=str(config.source or "config"))


def train(
    config: RunConfig,
    manager: PluginManager,
    run_path: Path,
    resume: bool = False,
    progress: Progress | None = None,
    resume_from: Path | None = None,
    allow_config_change: bool = False,
) -> dict[str, Any]:
    """SFT warm start (when ``sft.data`` is set), then GRPO; returns the run's summary. ``resume``
    continues from the last checkpoint, ``resume_from`` from the one named (an earlier, intact one);
    either refuses a config that changes the run's record unless ``allow_config_change``."""
    import torch

    from rlfcore.backends.local.local import LocalTrainer
    from rlfcore.backends.local.sft import train_sft

    start = time.perf_counter()
    refuse_chat_engine(config)
    base = config.base_dir
    if not config.data.train:
        raise ValueError("the config names no training data: set data.train")
    rows = training_rows(read_rows(resolve_path(config.data.train, base)), config)  # less data.difficulty's drops
    check_model(config, base)
    if resume_from is not None and not (resume_from / "trainer.pt").is_file():
        raise RunDirError(
            f"--resume-from {resume_from}: not a checkpoint (it has no trainer.pt); they are in RUN/checkpoints/step_N"
        )
    resume = resume or resume_from is not None
    with open_run_dir(run_path, config, resume, allow_config_change) as run_dir, _summary(run_dir, start) as times:
        Advisor()(config_warnings(config, training=True))
        torch.manual_seed(config.seed)
        runtime = Runtime.open(config, manager)  # one event loop for set-up, every step and shutdown
        try:
            run_dir.open_trackers(config)
            model_path = base_model = ensure_model(config, base, tool_schemas(runtime))

            grpo_ckpt = resume_from or (run_dir.last_checkpoint("step_") if resume else None)
            sft_ckpt = run_dir.checkpoints / "sft"
            if grpo_ckpt is None and config.sft.data and config.sft.steps:
                if resume and (sft_ckpt / "trainer.pt").exists():
                    model_path = sft_ckpt / "model"
                else:
                    run_dir.truncate_metrics(0, "sft_metrics.jsonl")
                    model, hf_tok = start_policy(config, base_model, model_path)
                    t0 = time.perf_counter()
                    sft_data = resolve_path(config.sft.data, base)
                    train_sft(model, hf_tok, runtime, sft_data, run_dir, _phase(progress, "sft"))
                    times["sft_s"] = time.perf_counter() - t0
                    run_dir.save_checkpoint("sft", model, hf_tok, {"step": config.sft.steps})
                    model_path = sft_ckpt / "model"
            elif grpo_ckpt is not None and (sft_ckpt / "trainer.pt").exists():
                model_path = sft_ckpt / "model"

            model, hf_tok = start_policy(config, base_model, model_path)  # with LoRA: SFT's adapters go on
            torch.manual_seed(config.seed)
            trainer = LocalTrainer(runtime, model, hf_tok, rows, run_dir)
            if grpo_ckpt is not None:
                trainer.restore(grpo_ckpt)
            times["grpo_start"] = time.perf_counter()
            trainer.run(_phase(progress, "grpo"))
        finally:
            run_dir.close()  # trackers finish their runs, also when training stopped on an error
            runtime.close()
        run_dir.curve(f"{config.source.stem if config.source else 'run'}: reward per step")
    summary: dict[str, Any] = json.loads((run_dir.path / "summary.json").read_text())
    return summary


@contextmanager
def _summary(run_dir: RunDir, start: float) -> Iterator[dict[str, float]]:
    """Write ``summary.json`` however the block ends: ``status`` finished, stopped (a signal; the error
    says how to resume) or failed (the error named), with the metrics' figures so far."""
    times: dict[str, float] = {"sft_s": 0.0}
    status, error = "failed", None
    try:
        yield times
        status = "finished"
    except Interrupted as exc:
        status, error = "stopped", f"{exc}: {exc.note}" if exc.note else str(exc)
        raise
    except BaseException as exc:
        error = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        grpo_start = times.pop("grpo_start", None)
        times["grpo_s"] = time.perf_counter() - grpo_start if grpo_start is not None else 0.0
        try:
            summary = summarize(run_dir.metrics(), **times, total_s=time.perf_counter() - start)
        except Exception as exc:  # an unreadable metrics file must not hide why the run ended
            summary = {"steps": None, "metrics_error": f"{type(exc).__name__}: {exc}"}
        summary["status"] = status
        if error is not None:
            summary["error"] = error
        (run_dir.path / "summary.json").write_text(json.dumps(summary, indent=2))


def sft_only(
    config: RunConfig, manager: PluginManager, run_path: Path, progress: Progress | None = None
) -> dict[str, Any]:
    """``rlf sft``: the warm start alone; the model is saved in ``checkpoints/sft/model``."""
    from rlfcore.backends.local.sft import mean_loss, train_sft

    base = config.base_dir
    if not config.sft.data:
        raise ValueError("the config names no SFT data: set sft.data (JSONL of conversations)")
    check_model(config, base)
    with open_run_dir(run_path, config) as run_dir:
        runtime = Runtime.open(config, manager)
        try:
            run_dir.open_trackers(config)
            base_model = ensure_model(config, base, tool_schemas(runtime))
            model, hf_tok = start_policy(config, base_model, base_model)
            t0 = time.perf_counter()
            history = train_sft(
                model, hf_tok, runtime, resolve_path(config.sft.data, base), run_dir, _phase(progress, "sft")
            )
        finally:
            run_dir.close()
            runtime.close()
        path = run_dir.save_checkpoint("sft", model, hf_tok, {"step": config.sft.steps})
    return {
        "steps": len(history),
        "loss_first": history[0]["loss"],
        "loss_last": mean_loss(history),
        "seconds": time.perf_counter() - t0,
        "model": str(path / "model"),
    }


def _phase(progress: Progress | None, phase: str) -> Callable[[dict[str, Any]], None] | None:
    return (lambda m: progress(phase, m)) if progress is not None else None
