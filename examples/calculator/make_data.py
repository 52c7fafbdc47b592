"""Arithmetic questions for the embedded default run, and mixed demonstrations for its SFT warm start.

Deterministic (seeded): ``python make_data.py`` rewrites questions.jsonl (GRPO), eval.jsonl and
demos.jsonl. Questions are two-digit sums, differences and products, which a small model cannot
learn by heart: the calculator tool is the way to them. Operands have a fixed width, so copying them
into a tool call is a fixed-offset pattern a tiny model learns quickly. Demonstrations call the tool on about
40% of questions and answer directly on the rest, so GRPO has both behaviours to choose between.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
TOOL = "calculate"


def question(rng: random.Random) -> tuple[str, str]:
    """Two-digit operands (a one-digit factor in products): fixed-width numbers, answers of 1 to 4 digits."""
    op = rng.choice("+-*")
    a, b = rng.randint(10, 99), rng.randint(10, 99) if op != "*" else rng.randint(2, 9)
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
        call = {
            "id": f"call_{call_id}",
            "type": "function",
            "function": {"name": TOOL, "arguments": {"expression": expression}},
        }
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
