"""``rlf openenv rows``: rows for an OpenEnv environment, whose tasks come from its reset rather than a dataset.

rlf openenv rows -n 100 --prompt "Play the game with the step tool." -o rows.jsonl
"""

from __future__ import annotations

import json
from pathlib import Path

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """Run OpenEnv environment servers with rlf."""


@cli.command()
@click.option(
    "-o", "--out", required=True, type=click.Path(dir_okay=False, path_type=Path), help="The JSONL file to write."
)
@click.option("-n", "count", required=True, type=click.IntRange(min=1), help="How many rows (episodes) to write.")
@click.option("--prompt", required=True, help="The user message before the environment's first observation.")
@click.option("--first-seed", default=0, show_default=True, type=click.IntRange(min=0), help="The first row's seed.")
def rows(out: Path, count: int, prompt: str, first_seed: int) -> None:
    """Write COUNT rows, each resetting its episode with a seed of its own (extra.openenv.reset.seed)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as f:
        for seed in range(first_seed, first_seed + count):
            row = {
                "id": f"seed-{seed}",
                "prompt": [{"role": "user", "content": prompt}],
                "extra": {"openenv": {"reset": {"seed": seed}}},
            }
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    click.echo(f"wrote {count} rows to {out}")
