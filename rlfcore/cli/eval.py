"""``rlf eval``: evaluate a model (local or served) with the run's tools and rewards."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from rlfcore.schema import RunConfig

GREEDY = ["rollout.n=1", "rollout.sampling.temperature=0"]
"""What ``--greedy`` sets: one sample per row, argmax decoding."""


@click.command("eval")
@click.argument("config_path", metavar="CONFIG", type=click.Path(dir_okay=False))
@click.argument("overrides", nargs=-1, metavar="[dotted.key=value]...")
@click.option(
    "--engine", help="Engine to use instead of engine.name: transformers, openai, openai-chat, or a plugin's."
)
@click.option("--limit", type=click.IntRange(min=1), help="Evaluate only the first N rows.")
@click.option(
    "--out", type=click.Path(dir_okay=False), help="JSONL file for the trajectories (default: runs/eval-*.jsonl)."
)
@click.option(
    "--greedy", is_flag=True, help="The usual evaluation settings: rollout.n=1, temperature 0 (overrides still win)."
)
@click.option(
    "--repeats",
    type=click.IntRange(min=1),
    help="Samples per row (sets rollout.n, over any override): the summary gives pass@k, and a difficulty file "
    "is written. Default: rollout.n.",
)
@click.option(
    "--solved-at",
    type=float,
    default=1.0,
    show_default=True,
    help="A sample solved its row when its reward is at least this (pass@k, solve rates).",
)
@click.option(
    "--difficulty",
    "difficulty_path",
    type=click.Path(dir_okay=False),
    help="Per-row difficulty JSONL (id, samples, solve rate, reward mean and variance); default with --repeats: "
    "OUT's name with .difficulty.jsonl.",
)
@click.pass_context
def eval_command(  # noqa: PLR0915 - the command's steps in order
    ctx: click.Context,
    config_path: str,
    overrides: tuple[str, ...],
    engine: str | None,
    limit: int | None,
    out: str | None,
    greedy: bool,
    repeats: int | None,
    solved_at: float,
    difficulty_path: str | None,
) -> None:
    """Roll out the rows of data.eval (or data.train) and score them: one JSON line per trajectory,
    then a summary table. Exits 1 when every trajectory failed (endpoint down, a broken scorer)."""
    from rlfcore.backends.local.model import ensure_model, tool_schemas
    from rlfcore.cli.train import announce_model_build
    from rlfcore.config import typed_overrides, validate
    from rlfcore.data import read_rows
    from rlfcore.evaluation import default_out, difficulty_out, evaluate, row_profiles, write_profiles
    from rlfcore.failures import RunFailed, check_not_all_failed, error_summary
    from rlfcore.runloop import RunLoop
    from rlfcore.runtime import Runtime

    if greedy and repeats is not None and repeats > 1:
        raise click.UsageError("--greedy decodes one argmax sample per row: drop it to sample --repeats times")
    wanted = (GREEDY if greedy else []) + list(overrides) + ([f"engine.name={engine}"] if engine else [])
    wanted += [f"rollout.n={repeats}"] if repeats is not None else []
    # Every problem at once (the data, the model included), before any MCP server starts or a file is written.
    config, manager = validate(config_path, typed_overrides(wanted), "eval")
    data = config.data.eval or config.data.train
    assert data is not None  # validate requires one
    rows = read_rows(config.path(data), limit=limit)
    out_path = Path(out) if out else default_out(config_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    profile_path = Path(difficulty_path) if difficulty_path else difficulty_out(out_path) if repeats else None
    debug = bool((ctx.find_root().obj or {}).get("debug"))

    async def main() -> tuple[list[Any], dict[str, Any]]:
        runtime = await Runtime.create(config, manager)
        try:
            if announce_model_build(config, "eval"):  # as rlf train does: the tokenizer learns the tool list too
                await asyncio.to_thread(ensure_model, config, config.base_dir, tool_schemas(runtime))
            tokenizer = runtime.tokenizer() if _needs_tokenizer(config.engine.name) else None
            model = runtime.engine(tokenizer)
            with _EvalProgress(len(rows)) as progress, out_path.open("w") as f:
                try:
                    return await evaluate(
                        runtime, model, tokenizer, rows, f, on_group=progress.advance, solved_at=solved_at
                    )
                finally:
                    await model.close()
        finally:
            await runtime.aclose()

    with RunLoop(config.tools.shutdown_timeout_s) as loop:  # unlike asyncio.run's, its close has deadlines
        trajectories, summary = loop.run(main())
    failed: RunFailed | None = None
    try:
        check_not_all_failed(trajectories, "rlf eval")
    except RunFailed as exc:
        failed = exc
    if failed is not None:
        profile_path = None  # rows that only failed are not hard: no file that would drop them as never solved
    if profile_path is not None:
        write_profiles(profile_path, row_profiles(trajectories, solved_at), solved_at)
    _print_summary(summary, out_path, profile_path, checked=_template_checked(config))
    line = error_summary(trajectories)
    if line:
        click.secho(f"errors: {line}", fg="yellow", err=True)
        if debug:
            _print_tracebacks(trajectories)
    if failed is not None:
        click.secho(f"error: {failed}", fg="red", err=True)
        ctx.exit(1)
    for warning in summary.get("warnings", []):
        click.secho(f"warning: {warning}", fg="yellow", err=True)


def _needs_tokenizer(engine: str) -> bool:
    """A chat-completions engine sends messages, not token ids: it needs no local tokenizer."""
    from rlfcore.schema import CHAT_ENGINES

    return engine not in CHAT_ENGINES


class _EvalProgress:
    """A bar on a terminal; in a log, one line every ~5% of the rows with reward, tool use and errors."""

    def __init__(self, total: int):
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

        from rlfcore.cli.progress import Lines, bars

        self.total, self.done, self.every = total, 0, max(1, total // 20)
        self.rewards: list[float] = []
        self.tool_use: list[bool] = []
        self.errors = 0
        self.view = bars(
            TextColumn("eval"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
        )
        self.lines = isinstance(self.view, Lines)
        self.task = None if self.lines else self.view.add_task("eval", total=total, info="")

    def __enter__(self) -> _EvalProgress:
        self.view.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.view.__exit__(*exc)

    def advance(self, group: list[Any]) -> None:
        from rlfcore.failures import error_of

        self.done += 1
        self.rewards.extend(t.reward for t in group)
        self.tool_use.extend(bool(t.tool_calls) for t in group)
        self.errors += sum(1 for t in group if error_of(t) is not None)
        info = (
            f"reward {sum(self.rewards) / len(self.rewards):.3f}  tool use {sum(self.tool_use) / len(self.tool_use):.2f}"
            f"  errors {self.errors}"
        )
        if not self.lines:
            self.view.update(self.task, advance=1, info=info)
        elif self.done % self.every == 0 or self.done == self.total:
            self.view.line(f"eval {self.done}/{self.total} rows  {info}")


def _print_tracebacks(trajectories: list[Any]) -> None:
    """``--debug``: where the first failing reward hook raised (a failing tool's traceback is logged
    by the executor as it happens)."""
    reward = next((t for t in trajectories if t.reward_traceback), None)
    if reward is not None:
        click.echo(f"traceback of the first reward error ({reward.id}):\n{reward.reward_traceback}", err=True)


def _template_checked(config: RunConfig) -> bool:
    """Whether the trajectories' tokens were compared with a full rendering (``rollout.check_template``);
    a chat engine builds no tokens to compare."""
    return bool(config.rollout.check_template) and _needs_tokenizer(config.engine.name)


def _print_summary(summary: dict[str, Any], out_path: Path, profile_path: Path | None, checked: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="rlf eval", show_header=False)
    table.add_row("trajectories", str(summary["trajectories"]))
    table.add_row("reward", f"{summary['reward_mean']:.4f} ± {summary['reward_std']:.4f}")
    for k, v in summary["components"].items():
        table.add_row(f"  {k}", f"{v:.4f}")
    if summary["samples_per_row"] > 1:
        table.add_row(f"mean@{summary['samples_per_row']}", f"{summary['mean_at_k']:.4f}")
        for k, v in summary["pass_at_k"].items():
            table.add_row(f"pass@{k} (reward >= {summary['solved_at']:g})", f"{v:.4f}")
    table.add_row("tool calls / trajectory", f"{summary['tool_calls_per_trajectory']:.2f}")
    table.add_row("tool error rate", f"{summary['tool_error_rate']:.3f}")
    table.add_row("turns / trajectory", f"{summary['turns_per_trajectory']:.2f}")
    table.add_row("stop reasons", ", ".join(f"{k} {v}" for k, v in summary["stop_reasons"].items()))
    if checked:  # docs/models.md: a mismatch on a tool turn is the loop's bug; on the model's own, its tokens
        table.add_row("template mismatches", str(summary["template_mismatches"]))
    if summary["reward_errors"]:
        table.add_row("reward errors", str(summary["reward_errors"]))
    for cause, n in summary.get("errors", {}).items():
        table.add_row(f"  error: {cause}", str(n))
    table.add_row("seconds", f"{summary['seconds']:.1f}")
    Console().print(table)
    click.echo(f"Trajectories written to {out_path}")
    if profile_path is not None:
        click.echo(f"Row difficulty written to {profile_path} (data.difficulty reads it)")
