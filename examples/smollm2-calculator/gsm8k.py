"""GSM8K rows as rlf rows, for the before/after check of this example: ``python gsm8k.py TEST.jsonl -n 200``.

Reads the public GSM8K JSONL (``question``, ``answer`` ending in ``#### N``) and writes ``{"id",
"prompt", "ground_truth"}`` lines, the prompt asking for the number only, as the example's questions
do. Nothing is bundled: give it the file (the project's copy is ``../shared/data/math/gsm8k/test.jsonl``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

SUFFIX = " Answer with the number only."


def convert(line: str, i: int) -> dict[str, object]:
    row = json.loads(line)
    final = row["answer"].rsplit("####", 1)[1].strip().replace(",", "")
    return {"id": f"gsm8k-{i:04d}", "prompt": row["question"].strip() + SUFFIX, "ground_truth": [final, f"{final}.0"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="GSM8K's test.jsonl")
    parser.add_argument("-n", type=int, default=200, help="the first N rows (default 200)")
    parser.add_argument("-o", "--out", type=Path, default=Path(__file__).parent / "gsm8k.jsonl")
    args = parser.parse_args()
    with args.source.open() as f:
        lines = [line for line in f if line.strip()][: args.n]
    args.out.write_text("".join(json.dumps(convert(x, i)) + "\n" for i, x in enumerate(lines)))
    print(f"wrote {len(lines)} rows to {args.out}")


if __name__ == "__main__":
    main()
