"""``rlf train``, ``rlf sft``, ``rlf rescore`` and ``rlf init-model``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click


def _run_path(config_path: str, run_dir: str | None) -> Path:
    return Path(run_dir) if run_dir else Path("runs") / f"{Path(config_path).stem}-{time.strftime('%Y%m%d-%H%M%S')}"


class _Bar:
    """A live progress bar per phase, showing the loss (SFT) or the reward (GRPO)."""

    def __init__(self, config: Any):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        self.progress = Progress(
            TextColumn("{task.description:>4}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(), TimeRemainingColumn(),
        )
        self.totals = {"sft": config.sft.steps, "grpo": config.trainer.steps}
        self.tasks: dict[str, Any] = {}

    def __call__(self, phase: str, m: dict[str, Any]) -> None:
        if phase not in self.tasks:
            self.tasks[phase] = self.progress.add_task(phase, total=self.totals[phase], info="")
        if phase == "sft":
            info = f"loss {m['loss']:.3f}"
        else:
            info = f"reward {m['reward_mean']:.3f}  tool use {m['tool_use']:.2f}  loss {m['loss']:+.4f}"
        self.progress.update(self.tasks[phase], completed=m["step"], info=info)


@click.command("train")
@click.argument("config_path", metavar="CONFIG", type=click.Path(dir_okay=False))
@click.argument("overrides", nargs=-1, metavar="[dotted.key=value]...")
@click.option("--run-dir", type=click.Path(file_okay=False), help="Where the run is written (default: runs/<config>-<time>).")
@click.option("--resume", is_flag=True, help="Continue the run in --run-dir from its last checkpoint.")
def train(config_path: str, overrides: tuple[str, ...], run_dir: str | None, resume: bool) -> None:
    """Train with GRPO (after an SFT warm start when sft.data is set), writing metrics, samples,
    checkpoints, a reward curve and a summary to the run folder."""
    from rlfcore.config import load_config
    from rlfcore.trainer.run import train as run_train

    if resume and not run_dir:
        raise click.UsageError("--resume needs --run-dir: the run to continue")
    config, manager = load_config(config_path, list(overrides))
    path = _run_path(config_path, run_dir)
    bar = _Bar(config)
    click.echo(f"Run folder: {path}")
    with bar.progress:
        summary = run_train(config, manager, path, resume=resume, progress=bar)
    _summary(summary, path)


@click.command("sft")
@click.argument("config_path", metavar="CONFIG", type=click.Path(dir_okay=False))
@click.argument("overrides", nargs=-1, metavar="[dotted.key=value]...")
@click.option("--run-dir", type=click.Path(file_okay=False), help="Where the run is written (default: runs/<config>-<time>).")
def sft(config_path: str, overrides: tuple[str, ...], run_dir: str | None) -> None:
    """Supervised warm start on sft.data (JSONL of conversations), loss on assistant tokens only."""
    from rlfcore.config import load_config
    from rlfcore.trainer.run import sft_only

    config, manager = load_config(config_path, list(overrides))
    path = _run_path(config_path, run_dir)
    bar = _Bar(config)
    with bar.progress:
        result = sft_only(config, manager, path, progress=bar)
    click.echo(f"SFT: {result['steps']} steps, loss {result['loss_first']:.3f} -> {result['loss_last']:.3f} "
               f"in {result['seconds']:.0f} s; model in {result['model']}")


@click.command("rescore")
@click.argument("input_path", metavar="INPUT.jsonl", type=click.Path(dir_okay=False, exists=True))
@click.argument("config_path", metavar="CONFIG", type=click.Path(dir_okay=False))
@click.argument("overrides", nargs=-1, metavar="[dotted.key=value]...")
@click.option("--out", type=click.Path(dir_okay=False), help="Where to write (default: INPUT.rescored.jsonl).")
def rescore(input_path: str, config_path: str, overrides: tuple[str, ...], out: str | None) -> None:
    """Recompute rewards over stored trajectories (from rlf eval or a run's samples) without generating."""
    import asyncio

    from rlfcore.config import load_config
    from rlfcore.rescoring import rescore_file

    config, manager = load_config(config_path, list(overrides))
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
    task's own text (digits as single tokens, Qwen-style special tokens, a chat template with tools)
    and a randomly initialised Qwen3 model. No download."""
    import asyncio

    from rlfcore.config import load_config
    from rlfcore.runtime import Runtime
    from rlfcore.tinymodel import describe
    from rlfcore.trainer.model import ensure_model, load_policy, tool_schemas
    from rlfcore.trainer.run import base_dir

    config, manager = load_config(config_path, list(overrides))
    runtime = asyncio.run(Runtime.create(config, manager))
    try:
        path = ensure_model(config, base_dir(config), tool_schemas(runtime))
    finally:
        asyncio.run(runtime.aclose())
    model, _ = load_policy(path, "cpu")
    click.echo(f"{describe(model)} at {path}")


def _summary(summary: dict[str, Any], path: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="rlf train", show_header=False)
    table.add_row("GRPO steps", str(summary.get("steps", 0)))
    if summary.get("steps"):
        table.add_row("reward, first 10% of steps", f"{summary['reward_first_10pct']:.3f}")
        table.add_row("reward, last 10% of steps", f"{summary['reward_last_10pct']:.3f}")
        table.add_row("tool use, first → last 10%", f"{summary['tool_use_first_10pct']:.2f} → {summary['tool_use_last_10pct']:.2f}")
    table.add_row("seconds: SFT / GRPO / total", f"{summary['sft_s']:.0f} / {summary['grpo_s']:.0f} / {summary['total_s']:.0f}")
    Console().print(table)
    click.echo(f"Run folder: {path} (metrics.jsonl, samples/, checkpoints/, reward_curve.png, summary.json)")
