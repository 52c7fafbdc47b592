"""Multiplication and division questions for the real-model example, in symbols and in words.

Deterministic (seeded): ``python make_data.py`` rewrites questions.jsonl (GRPO), heldout.jsonl (the
held-out split: no operand pair of it is asked in training or shown in a demonstration) and
demos.jsonl (the SFT warm start: each calls the calculator once, then answers with the number).
Operands have 2 to 4 digits; divisions are exact, so every answer is an integer (the calculator's
``77.0`` is accepted too). SmolLM2-135M-Instruct answers none of these right alone.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
TOOL = "calculate"
SUFFIX = " Answer with the number only."
ONES = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
]
TENS = ["_", "_", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]


def words(n: int) -> str:
    """``n`` (0 to 9999) in English words: 4389 -> four thousand three hundred eighty-nine."""
    parts = []
    if n >= 1000:
        parts.append(f"{ONES[n // 1000]} thousand")
        n %= 1000
    if n >= 100:
        parts.append(f"{ONES[n // 100]} hundred")
        n %= 100
    if n >= 20:
        parts.append(TENS[n // 10] + (f"-{ONES[n % 10]}" if n % 10 else ""))
    elif n or not parts:
        parts.append(ONES[n])
    return " ".join(parts)


def number(rng: random.Random) -> int:
    """2, 3 or 4 digits, each width as likely."""
    width = rng.randint(2, 4)
    return rng.randint(10 ** (width - 1), 10**width - 1)


def operands(rng: random.Random) -> tuple[str, int, int]:
    """An operation and two operands of 2 to 4 digits; a division's dividend is a multiple of its divisor."""
    if rng.random() < 0.5:
        return "*", number(rng), number(rng)
    divisor = rng.randint(10, 99)
    quotient = rng.randint(max(2, 100 // divisor), 9999 // divisor)
    return "/", divisor * quotient, divisor


def phrase(rng: random.Random, op: str, a: int, b: int) -> str:
    if rng.random() < 0.5:  # in words
        verb = "times" if op == "*" else "divided by"
        return f"What is {words(a)} {verb} {words(b)}?"
    symbol = rng.choice(["*", "×"]) if op == "*" else rng.choice(["/", "÷"])
    return rng.choice([f"What is {a}{symbol}{b}?", f"What is {a} {symbol} {b}?", f"Compute {a} {symbol} {b}."])


def rows(rng: random.Random, n: int, prefix: str, taken: set[tuple[str, int, int]]) -> list[dict]:
    out = []
    while len(out) < n:
        op, a, b = operands(rng)
        if (op, a, b) in taken:
            continue
        taken.add((op, a, b))
        value = a * b if op == "*" else a // b
        golds = [str(value)] if op == "*" else [str(value), f"{value}.0"]
        out.append(
            {
                "id": f"{prefix}{len(out):05d}",
                "prompt": phrase(rng, op, a, b) + SUFFIX,
                "ground_truth": golds,
                "expression": f"{a}{op}{b}",
            }
        )
    return out


def demo(row: dict, call_id: int) -> dict:
    call = {
        "id": f"call_{call_id}",
        "type": "function",
        "function": {"name": TOOL, "arguments": {"expression": row["expression"]}},
    }
    result = row["ground_truth"][-1]  # what the calculator prints: 77.0 for a division
    return {
        "messages": [
            {"role": "user", "content": row["prompt"]},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "name": TOOL, "content": result},
            {"role": "assistant", "content": row["ground_truth"][0]},
        ]
    }


def write(path: Path, items: list[dict]) -> None:
    path.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in items))


def main() -> None:
    rng = random.Random(0)
    taken: set[tuple[str, int, int]] = set()
    heldout = rows(rng, 200, "h", taken)
    train = rows(rng, 1000, "q", taken)
    demos = rows(rng, 300, "d", taken)
    write(HERE / "heldout.jsonl", heldout)
    write(HERE / "questions.jsonl", train)
    write(HERE / "demos.jsonl", [demo(r, i) for i, r in enumerate(demos)])


if __name__ == "__main__":
    main()
