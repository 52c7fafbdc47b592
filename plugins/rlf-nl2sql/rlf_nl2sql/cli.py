"""``rlf nl2sql``: prepare NL2SQL datasets as rlf rows, or write the shop demo to try the plugin (also
the ``rlf-nl2sql`` script).

rlf nl2sql prepare dev.json --db-dir database/ --out dev.jsonl          # Spider or BIRD
rlf nl2sql prepare geoquery.jsonl --out geoquery.rlf.jsonl --check      # databases beside the file
rlf nl2sql demo shop/                                                   # shop.sqlite, shop.jsonl, shop.yaml
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, get_args

import click

from rlf_nl2sql.answer import AnswerFormat

if TYPE_CHECKING:
    from rlf_nl2sql.prepare import SchemaPlace

DEMO_CONFIG = """\
# rlf eval shop.yaml model.path=/path/to/a/local/model
plugins: [nl2sql]
nl2sql:
  db_root: .
data:
  eval: shop.jsonl
rollout:
  max_turns: 4
"""


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """Prepare NL2SQL datasets as rlf rows, or write the shop demo."""


@cli.command()
@click.argument("source", metavar="INPUT", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--out", required=True, type=click.Path(dir_okay=False, path_type=Path), help="The JSONL file to write.")
@click.option(
    "--db-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder of the databases (default: INPUT's folder).",
)
@click.option(
    "--schema",
    type=click.Choice(["prompt", "tool"]),
    default="prompt",
    show_default=True,
    help="Put the schema in the prompt, or tell the model to call the schema tool (set nl2sql.schema_tool).",
)
@click.option("--answer-format", type=click.Choice(get_args(AnswerFormat)), default="sql_fence", show_default=True)
@click.option(
    "--where",
    multiple=True,
    metavar="FIELD=VALUE",
    help="Keep only records whose FIELD equals VALUE (e.g. question_split=test); repeatable.",
)
@click.option("--limit", type=int, help="Write at most this many rows.")
@click.option("--check", is_flag=True, help="Run each gold query and leave out those that fail.")
def prepare(
    source: Path,
    out: Path,
    db_dir: Path | None,
    schema: SchemaPlace,  # click.Choice holds both to their Literal's values
    answer_format: AnswerFormat,
    where: tuple[str, ...],
    limit: int | None,
    check: bool,
) -> None:
    """Turn Spider/BIRD/GeoQuery-style questions into rlf JSONL rows.

    INPUT is a JSON list (Spider, BIRD) or JSON lines (GeoQuery).
    """
    from rlf_nl2sql.prepare import PrepareError, read_records, write_jsonl
    from rlf_nl2sql.prepare import prepare as run

    chosen = {}
    for item in where:
        key, sep, value = item.partition("=")
        if not sep:
            raise click.ClickException(f"--where {item!r}: expected FIELD=VALUE")
        chosen[key] = value
    try:
        result = run(
            read_records(source),
            db_dir or source.parent,
            source=source.stem,
            schema=schema,
            answer_format=answer_format,
            where=chosen,
            limit=limit,
            check=check,
        )
        write_jsonl(result.rows, out)
    except (PrepareError, OSError, json.JSONDecodeError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"wrote {len(result.rows)} rows to {out}")
    if result.skipped:
        click.echo("\n  ".join([f"left out {len(result.skipped)} whose gold SQL fails:", *result.skipped[:20]]))


@cli.command()
@click.argument("folder", type=click.Path(file_okay=False, path_type=Path))
def demo(folder: Path) -> None:
    """Write the shop database, its questions as rows, and a run config."""
    from rlf_nl2sql.prepare import PrepareError, write_jsonl
    from rlf_nl2sql.prepare import prepare as run
    from rlf_nl2sql.shop import shop_db, shop_questions

    try:
        db = shop_db(folder)
        result = run([{**q, "db": db.name} for q in shop_questions()], folder, source="shop")
        write_jsonl(result.rows, folder / "shop.jsonl")
        (folder / "shop.yaml").write_text(DEMO_CONFIG)
    except (PrepareError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"wrote {db}, {folder / 'shop.jsonl'} ({len(result.rows)} rows) and {folder / 'shop.yaml'}")


def main(argv: Sequence[str] | None = None) -> int:
    """The ``rlf-nl2sql`` script: ``rlf nl2sql`` under its old name; returns the exit code."""
    try:
        cli.main(args=list(argv) if argv is not None else None, prog_name="rlf-nl2sql", standalone_mode=False)
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.Abort:
        return 130
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
