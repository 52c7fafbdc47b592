"""Arithmetic questions for the embedded default run, and mixed demonstrations for its SFT warm start.

Deterministic (seeded): ``python make_data.py`` rewrites questions.jsonl (GRPO), eval.jsonl and
demos.jsonl. Questions mix one-digit sums a small model can learn by heart with two- and three-digit
arithmetic it cannot: the calculator tool is the way to those. Demonstrations call the tool on about
40% of questions and answer directly on the rest, so GRPO has both behaviours to choose between.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
TOOL = "calculate"


def question(rng: random.Random) -> tuple[str, str]:
    op = rng.choice("+-*")
    digits = rng.choice([1, 2, 2, 3])
    hi = 10**digits - 1
    a, b = rng.randint(0, hi), rng.randint(0, hi if op != "*" else 99)
    expression = f"{a}{op}{b}"
    value = {"+": a + b, "-": a - b, "*": a * b}[op]
    return expression, str(value)


def rows(rng: random.Random, n: int, prefix: str) -> list[dict]:
    out = []
    for i in range(n):
        expression, answer = question(rng)
        out.append({"id": f"{prefix}{i:05d}", "prompt": f"What is {expression}?", "ground_truth": answer})
    return out


def demo(row: dict, rng: random.Random, call_id: int) -> dict:
    expression = row["prompt"][len("What is ") : -1]
    user = {"role": "user", "content": row["prompt"]}
    if rng.random() < 0.4:
        call = {"id": f"call_{call_id}", "type": "function", "function": {"name": TOOL, "arguments": {"expression": expression}}}
        return {
            "messages": [
                user,
                {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": f"call_{call_id}", "name": TOOL, "content": row["ground_truth"]},
                {"role": "assistant", "content": row["ground_truth"]},
            ]
        }
    return {"messages": [user, {"role": "assistant", "content": row["ground_truth"]}]}


def write(path: Path, items: list[dict]) -> None:
    path.write_text("".join(json.dumps(x) + "\n" for x in items))


def main() -> None:
    rng = random.Random(0)
    write(HERE / "questions.jsonl", rows(rng, 2000, "q"))
    write(HERE / "eval.jsonl", rows(rng, 200, "e"))
    demo_rows = rows(rng, 1000, "d")
    write(HERE / "demos.jsonl", [demo(r, rng, i) for i, r in enumerate(demo_rows)])


if __name__ == "__main__":
    main()
