"""``rlf-nl2sql``: prepare NL2SQL datasets as rlf rows, or write the shop demo to try the plugin.

rlf-nl2sql prepare dev.json --db-dir database/ --out dev.jsonl          # Spider or BIRD
rlf-nl2sql prepare geoquery.jsonl --out geoquery.rlf.jsonl --check      # databases beside the file
rlf-nl2sql demo shop/                                                   # shop.sqlite, shop.jsonl, shop.yaml
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import get_args

from rlf_nl2sql.answer import AnswerFormat
from rlf_nl2sql.prepare import PrepareError, prepare, read_records, write_jsonl
from rlf_nl2sql.shop import shop_db, shop_questions

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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="rlf-nl2sql", description="Prepare NL2SQL datasets as rlf rows, or write the shop demo."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("prepare", help="turn Spider/BIRD/GeoQuery-style questions into rlf JSONL rows")
    p.add_argument("input", type=Path, help="a JSON list (Spider, BIRD) or JSON lines (GeoQuery)")
    p.add_argument("--out", type=Path, required=True, help="the JSONL file to write")
    p.add_argument("--db-dir", type=Path, help="folder of the databases (default: the input's folder)")
    p.add_argument(
        "--schema",
        choices=["prompt", "tool"],
        default="prompt",
        help="put the schema in the prompt, or tell the model to call the schema tool (set nl2sql.schema_tool)",
    )
    p.add_argument("--answer-format", choices=get_args(AnswerFormat), default="sql_fence")
    p.add_argument(
        "--where",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="keep only records whose FIELD equals VALUE (e.g. question_split=test); repeatable",
    )
    p.add_argument("--limit", type=int, help="write at most this many rows")
    p.add_argument("--check", action="store_true", help="run each gold query and leave out those that fail")

    d = sub.add_parser("demo", help="write the shop database, its questions as rows, and a run config")
    d.add_argument("folder", type=Path)

    args = parser.parse_args(argv)
    try:
        return _prepare(args) if args.command == "prepare" else _demo(args.folder)
    except (PrepareError, OSError, json.JSONDecodeError) as exc:
        print(f"rlf-nl2sql {args.command}: {exc}", file=sys.stderr)
        return 1


def _prepare(args: argparse.Namespace) -> int:
    where = {}
    for item in args.where:
        key, sep, value = item.partition("=")
        if not sep:
            raise PrepareError(f"--where {item!r}: expected FIELD=VALUE")
        where[key] = value
    result = prepare(
        read_records(args.input),
        args.db_dir or args.input.parent,
        source=args.input.stem,
        schema=args.schema,
        answer_format=args.answer_format,
        where=where,
        limit=args.limit,
        check=args.check,
    )
    write_jsonl(result.rows, args.out)
    print(f"wrote {len(result.rows)} rows to {args.out}")
    if result.skipped:
        print(f"left out {len(result.skipped)} whose gold SQL fails:", *result.skipped[:20], sep="\n  ")
    return 0


def _demo(folder: Path) -> int:
    db = shop_db(folder)
    result = prepare([{**q, "db": db.name} for q in shop_questions()], folder, source="shop")
    write_jsonl(result.rows, folder / "shop.jsonl")
    (folder / "shop.yaml").write_text(DEMO_CONFIG)
    print(f"wrote {db}, {folder / 'shop.jsonl'} ({len(result.rows)} rows) and {folder / 'shop.yaml'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
