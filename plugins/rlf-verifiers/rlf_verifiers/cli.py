"""``rlf verifiers``: write an installed verifiers environment's tasks as rlf rows.

rlf verifiers prepare my-taskset -o rows.jsonl
rlf verifiers prepare my-taskset --args '{"split": "test"}' --limit 100 -o rows.jsonl
"""

from __future__ import annotations

import json
from pathlib import Path

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """Run installed verifiers environments with rlf."""


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
