"""``rlf train``, ``rlf sft``, ``rlf rescore`` and ``rlf init-model``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from rlfcore.backends import BACKENDS

if TYPE_CHECKING:
    from rlfcore.config import Command
    from rlfcore.schema import RunConfig


def _run_path(config_path: str, run_dir: str | None) -> Path:
    return Path(run_dir) if run_dir else Path("runs") / f"{Path(config_path).stem}-{time.strftime('%Y%m%d-%H%M%S')}"


class _Bar:
    """A live progress bar per phase, showing the loss (SFT) or the reward (GRPO); in a log (not a
    terminal), one line per GRPO step and per 5% of SFT. Shown from the first step reported, so a
    backend that reports none (verl prints its own) leaves the terminal alone."""

    def __init__(self, config: Any):
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        from rlfcore.cli.progress import Lines, bars

        self.progress = bars(
            TextColumn("{task.description:>4}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
        )
        self.lines = isinstance(self.progress, Lines)
        self.totals = {"sft": config.sft.steps, "grpo": config.trainer.steps}
        self.tasks: dict[str, Any] = {}
        self.shown = False

    def __enter__(self) -> _Bar:
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.shown:
            self.progress.__exit__(*exc)

    def __call__(self, phase: str, m: dict[str, Any]) -> None:
        if not self.shown:
            self.progress.__enter__()
            self.shown = True
        if phase == "sft":
            info = f"loss {m['loss']:.3f}"
        else:
            info = (
                f"reward {m['reward_mean']:.3f}  tool use {m['tool_use']:.2f}  loss {m['loss']:+.4f}"
                f"  step {m.get('step_s', 0.0):.1f} s"
            )
        total = self.totals[phase]
        if self.lines:
            if phase == "grpo" or m["step"] % max(1, total // 20) == 0 or m["step"] == total:
                self.progress.line(f"{phase} step {m['step']}/{total}  {info}")
            return
        if phase not in self.tasks:
            self.tasks[phase] = self.progress.add_task(phase, total=total, info="")
        self.progress.update(self.tasks[phase], completed=m["step"], info=info)


class _RunFolderRefused(click.ClickException):
    """The run folder cannot be used as asked (held by another process, another run, a changed config):
    a usage mistake, so exit code 2 like a config error."""

    exit_code = 2


class _TrainCommand(click.Command):
    """Keeps what follows ``--`` apart: raw verl overrides, passed to verl untouched."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if "--" in args:
            i = args.index("--")
            ctx.meta["raw_overrides"] = args[i + 1 :]
            args = args[:i]
        return super().parse_args(ctx, args)


_VERL_EPILOG = """\b
On a GPU cluster (--backend verl): rlf converts the data to verl's parquet layout, translates this
config into verl's Hydra config (checked by verl's own validation) and runs verl's PPO trainer with
the rlf_agent agent loop and rlf rewards. Anything after `--` is a raw verl override.
  rlf train run.yaml --backend verl --dry-run                  # print verl's config, launch nothing
  rlf train run.yaml --backend verl --gpus 8                   # one node, local Ray
  ray start --head --port 6379   (node 0);   ray start --address HEAD:6379   (other nodes)
  rlf train run.yaml --backend verl --gpus 8 --nodes 2 --ray-address HEAD:6379 -- trainer.logger=[console,wandb]
See docs/verl.md."""


@click.command("train", cls=_TrainCommand, epilog=_VERL_EPILOG)
@click.argument("config_path", metavar="[CONFIG]", required=False, type=click.Path(dir_okay=False))
@click.argument("overrides", nargs=-1, metavar="[dotted.key=value]... [-- verl.key=value...]")
@click.option(
    "--run-dir", type=click.Path(file_okay=False), help="Where the run is written (default: runs/<config>-<time>)."
)
@click.option(
    "--resume",
    is_flag=True,
    help="Continue the run in --run-dir from its last checkpoint, with the config it recorded (RUN/config.yaml; "
    "CONFIG is not needed) and the overrides given now.",
)
@click.option(
    "--resume-from",
    type=click.Path(file_okay=False, exists=True),
    help="Continue the run in --run-dir from this checkpoint (RUN/checkpoints/step_N), not the last one.",
)
@click.option(
    "--allow-config-change",
    is_flag=True,
    help="With --resume: continue even where the config differs from the run's config.yaml in settings that "
    "change what its steps mean (model, data, rollout.n, seed, algorithm); they are listed otherwise, and refused.",
)
@click.option(
    "--backend",
    type=click.Choice(list(BACKENDS)),
    default="local",
    show_default=True,
    help="  ".join(f"{name}: {line}." for name, (_, _, line) in BACKENDS.items()),
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Check the config, data and model as the backend would, print its plan; train nothing.",
)
@click.option("--gpus", "gpus_per_node", type=int, default=1, show_default=True, help="verl: GPUs per node.")
@click.option("--nodes", type=int, default=1, show_default=True, help="verl: nodes of the Ray cluster.")
@click.option("--ray-address", help="verl: an existing Ray cluster (HOST:PORT or auto); default: a local one.")
@click.option(
    "--rollout", type=click.Choice(["vllm", "sglang"]), default="vllm", show_default=True, help="verl: rollout engine."
)
@click.option(
    "--tp",
    "tensor_parallel",
    type=int,
    default=1,
    show_default=True,
    help="verl: tensor-parallel GPUs per rollout server.",
)
@click.pass_context
def train(
    ctx: click.Context,
    config_path: str | None,
    overrides: tuple[str, ...],
    run_dir: str | None,
    resume: bool,
    resume_from: str | None,
    allow_config_change: bool,
    backend: str,
    dry_run: bool,
    gpus_per_node: int,
    nodes: int,
    ray_address: str | None,
    rollout: str,
    tensor_parallel: int,
) -> None:
    """Train with GRPO (after an SFT warm start when sft.data is set), writing metrics, samples,
    checkpoints, a reward curve and a summary to the run folder; or on a cluster with verl.
    A resume needs only the run folder: `rlf train --run-dir RUN --resume [dotted.key=value]...`."""
    from rlfcore.backends import get_backend
    from rlfcore.backends.base import BackendError, ClusterOptions, TrainRequest
    from rlfcore.backends.local.lock import RunDirError
    from rlfcore.config import typed_overrides, validate

    if config_path is not None and "=" in config_path and not Path(config_path).is_file():
        overrides = (config_path, *overrides)  # `--run-dir RUN --resume key=value`: no CONFIG
        config_path = None
    resume = resume or bool(resume_from)
    if allow_config_change and not resume:
        raise click.UsageError("--allow-config-change is for --resume: a new run has no recorded config to differ from")
    if resume:
        if not run_dir:
            raise click.UsageError("--resume needs --run-dir: the run to continue")
        config_path = _resumed_config(Path(run_dir), config_path)
    elif config_path is None:
        raise click.UsageError("Missing argument 'CONFIG': the run config to train with (a YAML file)")
    typed = typed_overrides(overrides)
    validate(config_path, typed, "train", backend)  # every problem at once, before a run folder is named or made
    cluster = ClusterOptions(gpus_per_node, nodes, ray_address, rollout, tensor_parallel)
    request = TrainRequest(
        config_path,
        _run_path(config_path, run_dir),
        typed,
        ctx.meta.get("raw_overrides", []),
        resume,
        Path(resume_from) if resume_from else None,
        allow_config_change,
        cluster,
    )
    chosen = get_backend(backend)
    try:
        job = chosen.prepare(request)
    except BackendError as exc:
        raise click.UsageError(str(exc)) from None
    try:
        if dry_run:
            outcome = chosen.dry_run(job, click.echo)
        else:
            click.echo(f"Run folder: {request.run_dir}")
            announce_model_build(job.config, "train")
            with _Bar(job.config) as bar:
                outcome = (chosen.resume if resume else chosen.run)(job, bar)
    except RunDirError as exc:
        raise _RunFolderRefused(str(exc)) from None
    if outcome.summary is not None:
        _summary(outcome.summary, request.run_dir)
    ctx.exit(outcome.exit_code)


def _resumed_config(run: Path, config_path: str | None) -> str:
    """The config ``--resume`` reads: the run's own ``config.yaml``, its record (a resume continues the run
    that was started, overrides and all; CONFIG's settings are not read again); CONFIG only for a folder
    whose record names no config file (an older rlf's) and so cannot place its relative paths."""
    from rlfcore.paths import recorded_source

    record = run / "config.yaml"
    if record.is_file() and recorded_source(record.read_text()) is not None:
        unread = f"; {config_path} is not read again" if config_path else ""
        click.echo(
            f"Resuming with the run's recorded config, {record}, and the overrides given{unread} "
            "(change a setting with dotted.key=value)",
            err=True,
        )
        return str(record)
    if config_path is not None:
        return config_path
    why = "names no config file it came from (an older rlf's)" if record.is_file() else "does not exist"
    raise click.UsageError(f"--resume without CONFIG reads {record}, which {why}: pass the CONFIG the run started with")


@click.command("sft")
@click.argument("config_path", metavar="CONFIG", type=click.Path(dir_okay=False))
@click.argument("overrides", nargs=-1, metavar="[dotted.key=value]...")
@click.option(
    "--run-dir", type=click.Path(file_okay=False), help="Where the run is written (default: runs/<config>-<time>)."
)
def sft(config_path: str, overrides: tuple[str, ...], run_dir: str | None) -> None:
    """Supervised warm start on sft.data (JSONL of conversations), loss on assistant tokens only."""
    from rlfcore.backends.local.lock import RunDirError
    from rlfcore.backends.local.run import sft_only
    from rlfcore.config import typed_overrides, validate

    config, manager = validate(config_path, typed_overrides(overrides), "sft")
    path = _run_path(config_path, run_dir)
    try:
        with _Bar(config) as bar:
            result = sft_only(config, manager, path, progress=bar)
    except RunDirError as exc:
        raise _RunFolderRefused(str(exc)) from None
    click.echo(
        f"SFT: {result['steps']} steps, loss {result['loss_first']:.3f} -> {result['loss_last']:.3f} "
        f"in {result['seconds']:.0f} s; model in {result['model']}"
    )


@click.command("rescore")
@click.argument("input_path", metavar="INPUT.jsonl", type=click.Path(dir_okay=False, exists=True))
@click.argument("config_path", metavar="CONFIG", type=click.Path(dir_okay=False))
@click.argument("overrides", nargs=-1, metavar="[dotted.key=value]...")
@click.option("--out", type=click.Path(dir_okay=False), help="Where to write (default: INPUT.rescored.jsonl).")
def rescore(input_path: str, config_path: str, overrides: tuple[str, ...], out: str | None) -> None:
    """Recompute rewards over stored trajectories (from rlf eval or a run's samples) without generating."""
    import asyncio

    from rlfcore.config import load_config, typed_overrides
    from rlfcore.rescoring import rescore_file

    config, manager = load_config(config_path, typed_overrides(overrides))
    out_path = Path(out) if out else Path(input_path).with_suffix(".rescored.jsonl")
    summary = asyncio.run(rescore_file(config, manager, Path(input_path), out_path))
    click.echo(
        f"Rescored {summary['trajectories']} trajectories: reward {summary['reward_before']:.4f} -> "
        f"{summary['reward_after']:.4f} ({summary['changed']} changed); written to {out_path}"
    )


@click.command("init-model")
@click.argument("config_path", metavar="CONFIG", type=click.Path(dir_okay=False))
@click.argument("overrides", nargs=-1, metavar="[dotted.key=value]...")
def init_model(config_path: str, overrides: tuple[str, ...]) -> None:
    """Build the tiny model that model.init describes at model.path: a BPE tokenizer trained on the
    task's own text (digits as single tokens, Qwen-style special tokens, a chat template with tools),
    or a copy of the real tokenizer folder model.init.tokenizer, and a randomly initialised Qwen3
    model sized to it. No download."""
    from rlfcore.backends.local.model import ensure_model, load_policy, tool_schemas
    from rlfcore.config import load_config, typed_overrides
    from rlfcore.runtime import Runtime
    from rlfcore.tinymodel import describe

    config, manager = load_config(config_path, typed_overrides(overrides))
    announce_model_build(config, "config")
    runtime = Runtime.open(config, manager)
    try:
        path = ensure_model(config, config.base_dir, tool_schemas(runtime))
    finally:
        runtime.close()
    model, _ = load_policy(path, "cpu")
    click.echo(f"{describe(model)} at {path}")


def announce_model_build(config: RunConfig, command: Command) -> bool:
    """Whether ``command`` is to build the model ``model.init`` describes, said on stderr with where:
    training a tokenizer and writing a model takes a while before the first step or row."""
    from rlfcore.config import builds_model

    if not builds_model(config, command):
        return False
    where = config.path(config.model.path or ".")
    click.echo(f"Building the model model.init describes at {where} (model.path holds none yet)", err=True)
    return True


def _summary(summary: dict[str, Any], path: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="rlf train", show_header=False)
    table.add_row("GRPO steps", str(summary.get("steps", 0)))
    if summary.get("steps"):
        table.add_row("reward, first 10% of steps", f"{summary['reward_first_10pct']:.3f}")
        table.add_row("reward, last 10% of steps", f"{summary['reward_last_10pct']:.3f}")
        table.add_row(
            "tool use, first → last 10%",
            f"{summary['tool_use_first_10pct']:.2f} → {summary['tool_use_last_10pct']:.2f}",
        )
        if summary.get("steps_without_signal"):
            table.add_row("steps with nothing to learn", f"{summary['steps_without_signal']} (active_fraction 0)")
    table.add_row(
        "seconds: SFT / GRPO / total", f"{summary['sft_s']:.0f} / {summary['grpo_s']:.0f} / {summary['total_s']:.0f}"
    )
    Console().print(table)
    click.echo(f"Run folder: {path} (metrics.jsonl, samples/, checkpoints/, reward_curve.png, summary.json)")
