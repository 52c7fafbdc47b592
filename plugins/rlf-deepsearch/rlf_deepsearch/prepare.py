"""QA files (NQ-open, HotpotQA, FlashRAG/Search-R1 style) to rlf dataset rows for the deepsearch env.

A record has a ``question`` and its gold answers under ``answer``, ``answers`` or
``golden_answers`` (a string or a list). A row is ``{"id", "env", "prompt", "ground_truth": [...],
"extra"}``; ``extra`` keeps the question and any ``supporting_ids`` (for retrieval recall).

An output ending in ``.parquet`` gets Search-R1's training layout instead (its
``scripts/data_process/nq_search.py``), which is also verl's: the record's ``id``, ``question``
(ending in "?") and ``golden_answers``, then ``data_source`` (``nq``, ``hotpotqa``), ``prompt`` (one
user message with Search-R1's instructions), ``ability`` ``fact-reasoning``, ``reward_model``
``{"style": "rule", "ground_truth": {"target": [...]}}`` and ``extra_info`` ``{"split", "index"}``.
An ``env`` column routes the rows to this plugin when rlf reads them; Search-R1 and verl ignore it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

INSTRUCTIONS = {
    "hermes": (
        "Answer the question. Search the corpus with the search tool as many times as you need, "
        "then give only the final answer inside <answer> and </answer>, for example <answer>Paris</answer>.\n"
        "Question: {question}"
    ),
    "search-r1": (  # Search-R1's make_prefix (scripts/data_process/nq_search.py), word for word
        "Answer the given question. You must conduct reasoning inside <think> and </think> first every time you "
        "get new information. After reasoning, if you find you lack some knowledge, you can call a search engine "
        "by <search> query </search> and it will return the top searched results between <information> and "
        "</information>. You can search as many times as your want. If you find no further external knowledge "
        "needed, you can directly provide the answer inside <answer> and </answer>, without detailed "
        "illustrations. For example, <answer> Beijing </answer>. Question: {question}\n"
    ),
}
ANSWER_KEYS = ("answer", "answers", "golden_answers")
EXTRA_KEYS = ("supporting_ids", "context_ids", "type", "level")


class PrepareError(ValueError):
    """An input record is unusable; the message names the file and line."""


def read_records(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(where, record)`` for each record of a JSONL file, or of a JSON file holding a list."""
    if path.suffix == ".json":
        data = json.loads(path.read_text())
        if not isinstance(data, list):
            raise PrepareError(f"{path}: a .json input must hold a list of records")
        yield from ((f"{path}: record {i}", r) for i, r in enumerate(data))
        return
    with path.open() as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    yield f"{path}:{n}", json.loads(line)
                except json.JSONDecodeError as exc:
                    raise PrepareError(f"{path}:{n}: not valid JSON: {exc.msg}") from None


def to_row(record: Any, where: str, row_id: str, fmt: str = "hermes", env: str = "deepsearch") -> dict[str, Any]:
    """One QA record as an rlf row with the format's instructions around the question."""
    if not isinstance(record, dict):
        raise PrepareError(f"{where}: expected an object, got {type(record).__name__}")
    question = record.get("question")
    if not isinstance(question, str) or not question.strip():
        raise PrepareError(f"{where}: no 'question' string")
    key = next((k for k in ANSWER_KEYS if k in record), None)
    if key is None:
        raise PrepareError(f"{where}: no gold answers: expected one of {', '.join(ANSWER_KEYS)}")
    answers = record[key] if isinstance(record[key], list) else [record[key]]
    answers = [str(a) for a in answers if str(a).strip()]
    if not answers:
        raise PrepareError(f"{where}: '{key}' holds no non-empty answer")
    question = question.strip()
    asked = question if fmt != "search-r1" or question.endswith("?") else question + "?"  # as Search-R1 asks it
    extra = {"question": question, **{k: record[k] for k in EXTRA_KEYS if k in record}}
    return {
        "id": str(record.get("id", row_id)),
        "env": env,
        "prompt": INSTRUCTIONS[fmt].format(question=asked),
        "ground_truth": answers,
        "extra": extra,
    }


def data_source(path: Path) -> str:
    """Search-R1's name of a QA file's dataset, from its file or folder name (``nq``, ``hotpotqa``, ...)."""
    name = f"{path.parent.name}/{path.stem}".lower()
    for source in ("hotpotqa", "2wikimultihopqa", "musique", "bamboogle", "triviaqa", "popqa", "nq"):
        if source in name.replace("-", "").replace("_", ""):
            return source
    return path.stem


def search_r1_record(row: dict[str, Any], source: str, split: str, index: int, env: str) -> dict[str, Any]:
    """An rlf row (of :func:`to_row`, search-r1 format) in Search-R1's parquet layout."""
    question = row["extra"]["question"]
    asked = question if question.endswith("?") else question + "?"
    extra = {"split": split, "index": index, **{k: v for k, v in row["extra"].items() if k != "question"}}
    return {
        "id": row["id"],
        "question": asked,
        "golden_answers": row["ground_truth"],
        "data_source": source,
        "prompt": [{"role": "user", "content": row["prompt"]}],
        "ability": "fact-reasoning",
        "reward_model": {"style": "rule", "ground_truth": {"target": row["ground_truth"]}},
        "extra_info": extra,
        "env": env,
    }


def prepare(
    inputs: list[Path],
    out: Path,
    fmt: str = "hermes",
    env: str = "deepsearch",
    limit: int | None = None,
    split: str = "train",
) -> int:
    """Write the rows of every input to ``out`` (JSONL, or Search-R1's parquet layout for a ``.parquet``
    name, which implies the search-r1 format); returns how many. Ids must be unique."""
    parquet = out.suffix == ".parquet"
    if parquet:
        fmt = "search-r1"
        try:  # before reading the inputs, which may be large
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError as exc:
            raise PrepareError(
                f"{out}: writing parquet needs pyarrow: pip install 'rlf-deepsearch[parquet]' (or pip install pyarrow)"
            ) from exc
    seen: set[str] = set()
    rows: list[dict[str, Any]] = []
    for path in inputs:
        source = data_source(path)
        for i, (where, record) in enumerate(read_records(path)):
            if limit is not None and len(rows) >= limit:
                break
            row = to_row(record, where, f"{path.stem}-{i:06d}", fmt, env)
            if row["id"] in seen:
                raise PrepareError(f"{where}: duplicate id {row['id']!r}")
            seen.add(row["id"])
            rows.append(search_r1_record(row, source, split, len(rows), env) if parquet else row)
    out.parent.mkdir(parents=True, exist_ok=True)
    if parquet:
        if not rows:
            raise PrepareError(f"no records in {', '.join(map(str, inputs))}: nothing to write to {out}")
        pq.write_table(pa.Table.from_pylist(rows), out)
    else:
        with out.open("w") as f:
            f.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    return len(rows)
