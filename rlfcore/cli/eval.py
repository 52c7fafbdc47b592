"""``rlf eval``: evaluate a model (local or served) with the run's tools and rewards."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("eval")
@click.argument("config_path", metavar="CONFIG", type=click.Path(dir_okay=False))
@click.argument("overrides", nargs=-1, metavar="[dotted.key=value]...")
@click.option("--engine", help="Engine to use instead of engine.name: transformers, openai, or a plugin's.")
@click.option("--limit", type=click.IntRange(min=1), help="Evaluate only the first N rows.")
@click.option("--out", type=click.Path(dir_okay=False), help="JSONL file for the trajectories (default: runs/eval-*.jsonl).")
def eval_command(config_path: str, overrides: tuple[str, ...], engine: str | None, limit: int | None, out: str | None) -> None:
    """Roll out the rows of data.eval (or data.train) and score them: one JSON line per trajectory,
    then a summary table."""
    import asyncio

    from rlfcore.config import load_config
    from rlfcore.data import read_rows
    from rlfcore.evaluation import default_out, evaluate
    from rlfcore.runtime import Runtime, model_source

    config, manager = load_config(config_path, list(overrides) + ([f"engine.name={engine}"] if engine else []))
    model_source(config)  # a missing model fails here, before any MCP server starts
    data = config.data.eval or config.data.train
    if not data:
        raise click.UsageError("the config names no dataset: set data.eval (or data.train)")
    base = Path(config_path).resolve().parent
    rows = read_rows(data if Path(data).is_absolute() else base / data, limit=limit)
    out_path = Path(out) if out else default_out(config_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)

    async def main() -> dict:
        runtime = await Runtime.create(config, manager)
        tokenizer = runtime.tokenizer()
        model = runtime.engine(tokenizer)
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        rewards: list[float] = []
        with Progress(
            TextColumn("eval"), BarColumn(), MofNCompleteColumn(), TextColumn("reward {task.fields[reward]:.3f}"),
            TimeElapsedColumn(), transient=False,
        ) as bar, out_path.open("w") as f:
            task = bar.add_task("eval", total=len(rows), reward=0.0)

            def advance(group: list) -> None:
                rewards.extend(t.reward for t in group)
                bar.update(task, advance=1, reward=sum(rewards) / len(rewards))

            try:
                _, summary = await evaluate(runtime, model, tokenizer, rows, f, on_group=advance)
            finally:
                await model.close()
                await runtime.aclose()
        return summary

    summary = asyncio.run(main())
    _print_summary(summary, out_path)


def _print_summary(summary: dict, out_path: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="rlf eval", show_header=False)
    table.add_row("trajectories", str(summary["trajectories"]))
    table.add_row("reward", f"{summary['reward_mean']:.4f} ± {summary['reward_std']:.4f}")
    for k, v in summary["components"].items():
        table.add_row(f"  {k}", f"{v:.4f}")
    table.add_row("tool calls / trajectory", f"{summary['tool_calls_per_trajectory']:.2f}")
    table.add_row("tool error rate", f"{summary['tool_error_rate']:.3f}")
    table.add_row("turns / trajectory", f"{summary['turns_per_trajectory']:.2f}")
    table.add_row("stop reasons", ", ".join(f"{k} {v}" for k, v in summary["stop_reasons"].items()))
    if summary["reward_errors"]:
        table.add_row("reward errors", str(summary["reward_errors"]))
    table.add_row("seconds", f"{summary['seconds']:.1f}")
    Console().print(table)
    click.echo(f"Trajectories written to {out_path}")
