"""``rlf verifiers``: write an installed verifiers environment's tasks as rlf rows, or an rlf run config as a
verifiers environment package.

rlf verifiers prepare my-taskset -o rows.jsonl
rlf verifiers prepare my-taskset --args '{"split": "test"}' --limit 100 -o rows.jsonl
rlf verifiers export run.yaml -o rlf-calculator/        # then: pip install ./rlf-calculator; vf-eval rlf-calculator
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from rlf_verifiers.export import Split


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """Run installed verifiers environments with rlf, or rlf's as verifiers environments."""


@cli.command()
@click.argument("env")
@click.option(
    "-o", "--out", required=True, type=click.Path(dir_okay=False, path_type=Path), help="The JSONL file to write."
)
@click.option("--args", "args_json", default="{}", help="The taskset's arguments as a JSON object (verifiers.args).")
@click.option("--limit", type=click.IntRange(min=1), help="Write at most this many rows (needed for endless tasksets).")
def prepare(env: str, out: Path, args_json: str, limit: int | None) -> None:
    """Write verifiers environment ENV's tasks as rlf JSONL rows (each row keeps its task for scoring)."""
    from rlf_verifiers.bridge import Unsupported, load, tasks, to_row

    try:
        args = json.loads(args_json)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="--args") from None
    if not isinstance(args, dict):
        raise click.BadParameter(f"a JSON object is needed, got {args_json}", param_hint="--args")
    try:
        environment = load(env, args)
        rows = [to_row(environment, task) for task in tasks(environment, limit)]
    except (Unsupported, ModuleNotFoundError) as exc:
        raise click.ClickException(str(exc)) from None
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    click.echo(f"wrote {len(rows)} rows to {out}")


@cli.command()
@click.argument("config", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("overrides", nargs=-1)
@click.option(
    "-o", "--out", required=True, type=click.Path(file_okay=False, path_type=Path), help="The package folder to write."
)
@click.option("--name", help="The environment's name, what vf-eval takes (default: the folder's name).")
@click.option(
    "--split", type=click.Choice(["eval", "train"]), default="eval", show_default=True, help="Which rows are the tasks."
)
@click.option("--limit", type=click.IntRange(min=1), help="Export at most this many rows.")
def export(
    config: Path, overrides: tuple[str, ...], out: Path, name: str | None, split: Split, limit: int | None
) -> None:
    """Write run CONFIG (with KEY=VALUE OVERRIDES) as an installable verifiers environment: its rows as the
    tasks, its plugins' tools as a verifiers toolset, rlf's reward as the reward."""
    from rlf_verifiers.export import ExportError
    from rlf_verifiers.export import export as write
    from rlfcore import ConfigError

    try:
        ids = write(config, out, name, split, limit, list(overrides))
    except (ExportError, ConfigError) as exc:
        raise click.ClickException(str(exc)) from None
    name = name or out.resolve().name
    click.echo(f"wrote {out} ({len(ids)} tasks): pip install {out}; vf-eval {name} --env.agent.runtime.type subprocess")
