"""BM25 search: rlf-deepsearch's bm25s index against rank-bm25 (the common choice), in one run.

For HotpotQA's real corpus (4,858 paragraphs, its 250 questions) and a synthetic corpus (default 1M
passages, Zipf-distributed words, generated deterministically): index build time from the JSONL file,
queries per second one at a time and in one batch, peak memory (RSS) and, for HotpotQA, recall@5 of
the supporting paragraphs. Synthetic queries are 4 words of a random passage; "found@5" is how often
that passage comes back in the top 5. For HotpotQA the same index is also queried through the
retrieval server (Search-R1's API over HTTP on loopback). Each measurement runs in its own process
so that peak memory is its own.

rank-bm25 scores every passage in Python for each query term, so on big corpora it is bounded: it
indexes at most ``--rank-bm25-max-docs`` passages and answers queries for at most
``--rank-bm25-seconds``; the output says when a bound applied.

    python benchmarks/bm25_search.py                        # the full run (about 10 min on 2 cores)
    python benchmarks/bm25_search.py --synthetic-size 10000 # a quick one

Prints a table and writes ``benchmarks/results/bm25_search.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_HOTPOT = HERE.parents[2].parent / "shared" / "data" / "qa" / "hotpotqa"
TOPK = 5


# --- data ------------------------------------------------------------------------------------------


def synthetic_corpus(n: int, folder: Path, seed: int = 0) -> tuple[Path, Path]:
    """``n`` passages of 40-120 words drawn from a Zipf law (s = 1.1) over 200k pseudo-words, and 1,000
    queries of 4 words from random passages. Deterministic: the same ``n`` and seed give the same files."""
    import numpy as np

    corpus, queries = folder / f"synthetic-{n}.jsonl", folder / f"synthetic-{n}.queries.jsonl"
    if corpus.is_file() and queries.is_file():
        return corpus, queries
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    vocab_size = 200_000
    lengths = rng.integers(3, 11, size=vocab_size)
    letters = (rng.integers(0, 26, size=(vocab_size, 10)) + ord("a")).astype(np.uint8).tobytes()
    vocab = np.array([letters[i * 10 : i * 10 + k].decode() for i, k in enumerate(lengths)], dtype=object)
    weights = 1.0 / np.arange(1, vocab_size + 1) ** 1.1
    cdf = np.cumsum(weights / weights.sum())
    picked = set(rng.choice(n, size=min(1000, n), replace=False).tolist())
    query_rows = []
    tmp = corpus.with_suffix(".tmp")
    with tmp.open("w") as f:
        for start in range(0, n, 10_000):
            count = min(10_000, n - start)
            sizes = rng.integers(40, 121, size=count)
            words = vocab[np.searchsorted(cdf, rng.random(int(sizes.sum())))]
            offsets = np.concatenate([[0], np.cumsum(sizes)])
            for j in range(count):
                doc = words[offsets[j] : offsets[j + 1]]
                i = start + j
                f.write(json.dumps({"id": f"s{i:07d}", "title": " ".join(doc[:2]), "text": " ".join(doc[2:])}) + "\n")
                if i in picked:
                    chosen = rng.choice(len(doc), size=4, replace=False)
                    query_rows.append({"question": " ".join(doc[chosen]), "supporting_ids": [f"s{i:07d}"]})
    tmp.rename(corpus)
    queries.write_text("".join(json.dumps(q) + "\n" for q in query_rows))
    return corpus, queries


def hotpot_queries(hotpot: Path, folder: Path) -> Path:
    out = folder / "hotpotqa.queries.jsonl"
    rows = [json.loads(line) for line in (hotpot / "questions.jsonl").read_text().splitlines()]
    out.write_text(
        "".join(json.dumps({"question": r["question"], "supporting_ids": r["supporting_ids"]}) + "\n" for r in rows)
    )
    return out


# --- one measurement (a child process) ------------------------------------------------------------------


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def recall(queries: list[dict], ranked: list[list[str]]) -> float:
    """Mean share of each query's supporting passages found in its top ``TOPK``."""
    return sum(
        len(set(q["supporting_ids"]) & set(r[:TOPK])) / len(q["supporting_ids"]) for q, r in zip(queries, ranked)
    ) / len(queries)


def measure_bm25s_build(corpus: Path, cache: Path) -> dict:
    """Build and cache the index from the JSONL file, in a fresh process: the one-time cost."""
    sys.path.insert(0, str(HERE.parent))
    from rlf_deepsearch.index import BM25Index

    shutil.rmtree(cache, ignore_errors=True)
    start, cpu = time.perf_counter(), time.process_time()
    index = BM25Index.open(corpus, cache)  # tokenize, index, save, memory-map
    build_s, build_cpu_s = time.perf_counter() - start, time.process_time() - cpu
    index_mb = sum(p.stat().st_size for p in cache.rglob("*") if p.is_file()) / 2**20
    return {"passages": len(index), "build_s": build_s, "build_cpu_s": build_cpu_s, "index_mb": index_mb}


def measure_bm25s(corpus: Path, cache: Path, queries: list[dict], http: bool) -> dict:
    """Load the cached index and search, in a fresh process: what every worker pays."""
    sys.path.insert(0, str(HERE.parent))
    from rlf_deepsearch.index import BM25Index

    texts = [q["question"] for q in queries]
    start = time.perf_counter()
    index = BM25Index.open(corpus, cache)
    out = {"passages": len(index), "load_s": time.perf_counter() - start}
    if http:
        return {**out, **_measure_http(index, texts, queries)}
    start = time.perf_counter()
    single = [[p.id for p in index.search([t], TOPK)[0]] for t in texts]
    out["qps_single"] = len(texts) / (time.perf_counter() - start)
    start = time.perf_counter()
    batched = [[p.id for p in row] for row in index.search(texts, TOPK)]
    out["qps_batched"] = len(texts) / (time.perf_counter() - start)
    assert batched == single, "batched and single searches disagree"
    out["recall@5"] = recall(queries, single)
    return out


def _measure_http(index, texts: list[str], queries: list[dict]) -> dict:
    from rlf_deepsearch.search import RemoteSearcher
    from rlf_deepsearch.server import RetrievalServer

    server = RetrievalServer(index, "127.0.0.1", 0, passages=len(index))
    server.start()
    client = RemoteSearcher(server.url)
    try:
        start = time.perf_counter()
        single = [[p.id for p in client.search([t], TOPK)[0]] for t in texts]
        qps_single = len(texts) / (time.perf_counter() - start)
        start = time.perf_counter()
        batched = [
            [p.id for p in row] for i in range(0, len(texts), 64) for row in client.search(texts[i : i + 64], TOPK)
        ]
        qps_batched = len(texts) / (time.perf_counter() - start)
    finally:
        server.shutdown()
        server.server_close()
    assert batched == single
    return {"qps_single": qps_single, "qps_batched": qps_batched, "recall@5": recall(queries, single)}


def measure_rank_bm25(corpus: Path, queries: list[dict], max_docs: int, seconds: float) -> dict:
    import bm25s
    import numpy as np
    import Stemmer
    from rank_bm25 import BM25Okapi

    stemmer = Stemmer.Stemmer("english")
    start, cpu = time.perf_counter(), time.process_time()
    ids, texts = [], []
    with corpus.open() as f:
        for line in f:
            if len(ids) >= max_docs:
                break
            doc = json.loads(line)
            ids.append(doc["id"])
            texts.append(f"{doc['title']}\n{doc['text']}")
    with corpus.open() as f:
        total = sum(1 for _ in f) if len(ids) >= max_docs else len(ids)
    tokens = bm25s.tokenize(
        texts, stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False
    )  # the same tokens as bm25s
    del texts
    bm25 = BM25Okapi(tokens)
    del tokens
    build_s, build_cpu_s = time.perf_counter() - start, time.process_time() - cpu
    query_tokens = bm25s.tokenize(
        [q["question"] for q in queries], stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False
    )
    ranked: list[list[str]] = []
    start = time.perf_counter()
    for qt in query_tokens:
        scores = bm25.get_scores(qt)
        top = np.argpartition(-scores, TOPK)[:TOPK]
        ranked.append([ids[i] for i in top[np.argsort(-scores[top])]])
        if time.perf_counter() - start > seconds and len(ranked) >= 10:
            break
    qps = len(ranked) / (time.perf_counter() - start)
    out = {
        "passages": len(ids),
        "build_s": build_s,
        "build_cpu_s": build_cpu_s,
        "qps_single": qps,
        "qps_batched": None,
        "queries_run": len(ranked),
    }
    if len(ids) < total:
        out["bound"] = f"indexed {len(ids):,} of {total:,} passages (--rank-bm25-max-docs)"
    if len(ranked) < len(queries):
        out["bound"] = (
            out.get("bound", "") + "; " if "bound" in out else ""
        ) + f"QPS from {len(ranked)} of {len(queries)} queries (--rank-bm25-seconds)"
    if len(ranked) == len(queries) and len(ids) == total:
        out["recall@5"] = recall(queries, ranked)
    return out


def worker(args: argparse.Namespace) -> None:
    queries = [json.loads(line) for line in Path(args.queries).read_text().splitlines()][: args.num_queries]
    corpus, cache = Path(args.corpus), Path(args.cache)
    if args.worker == "rank-bm25":
        out = measure_rank_bm25(corpus, queries, args.rank_bm25_max_docs, args.rank_bm25_seconds)
        out["build_peak_mb"] = peak_rss_mb()
    elif args.worker == "bm25s-build":
        out = measure_bm25s_build(corpus, cache)
        out["build_peak_mb"] = peak_rss_mb()
    else:
        out = measure_bm25s(corpus, cache, queries, http=args.worker == "bm25s-http")
    out["peak_rss_mb"] = peak_rss_mb()
    print(json.dumps(out))


# --- the run --------------------------------------------------------------------------------------------


def run_worker(engine: str, corpus: Path, queries: Path, cache: Path, args: argparse.Namespace) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--worker",
        engine,
        "--corpus",
        str(corpus),
        "--queries",
        str(queries),
        "--cache",
        str(cache),
        "--num-queries",
        str(args.num_queries),
        "--rank-bm25-max-docs",
        str(args.rank_bm25_max_docs),
        "--rank-bm25-seconds",
        str(args.rank_bm25_seconds),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _fmt(value: object, spec: str) -> str:
    return format(value, spec) if value is not None else "-".rjust(int(spec.split(".", maxsplit=1)[0]))


def main() -> None:  # noqa: PLR0915 - the script's steps, in order
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--hotpotqa", type=Path, default=DEFAULT_HOTPOT, help="Folder with corpus.jsonl and questions.jsonl."
    )
    parser.add_argument(
        "--synthetic-size", type=int, default=1_000_000, help="Passages of the synthetic corpus (0: skip it)."
    )
    parser.add_argument("--num-queries", type=int, default=1000, help="Queries per measurement, at most.")
    parser.add_argument(
        "--rank-bm25-max-docs", type=int, default=1_000_000, help="rank-bm25 indexes at most this many passages."
    )
    parser.add_argument(
        "--rank-bm25-seconds", type=float, default=120.0, help="rank-bm25 answers queries for at most this long."
    )
    parser.add_argument("--skip-rank-bm25", action="store_true", help="Measure rlf-deepsearch only.")
    parser.add_argument(
        "--work-dir", type=Path, default=HERE / "results" / "data", help="Where generated corpora are kept."
    )
    parser.add_argument("--out", type=Path, default=HERE / "results" / "bm25_search.json")
    parser.add_argument("--worker", choices=["bm25s-build", "bm25s", "bm25s-http", "rank-bm25"], help=argparse.SUPPRESS)
    parser.add_argument("--corpus", help=argparse.SUPPRESS)
    parser.add_argument("--cache", help=argparse.SUPPRESS)
    parser.add_argument("--queries", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)

    args.work_dir.mkdir(parents=True, exist_ok=True)
    datasets: list[tuple[str, Path, Path]] = []
    if (args.hotpotqa / "corpus.jsonl").is_file():
        datasets.append(("hotpotqa", args.hotpotqa / "corpus.jsonl", hotpot_queries(args.hotpotqa, args.work_dir)))
    else:
        print(f"HotpotQA not found at {args.hotpotqa}: skipped", file=sys.stderr)
    if args.synthetic_size:
        start = time.perf_counter()
        corpus, queries = synthetic_corpus(args.synthetic_size, args.work_dir)
        print(
            f"synthetic corpus of {args.synthetic_size:,} passages ready in {time.perf_counter() - start:.0f} s",
            file=sys.stderr,
        )
        datasets.append((f"synthetic-{args.synthetic_size}", corpus, queries))

    results = []
    for name, corpus, queries in datasets:
        cache = args.work_dir / "index" / name
        build = run_worker("bm25s-build", corpus, queries, cache, args)
        runs = {"bm25s": build, "bm25s-http": {}} if name == "hotpotqa" else {"bm25s": build}
        if not args.skip_rank_bm25:
            runs["rank-bm25"] = {}
        for engine, built in runs.items():
            print(f"measuring {engine} on {name} ...", file=sys.stderr, flush=True)
            measured = (
                run_worker(engine, corpus, queries, cache, args)
                if "error" not in build or engine == "rank-bm25"
                else build
            )
            results.append({"corpus": name, "engine": engine, **built, **measured})
        shutil.rmtree(cache, ignore_errors=True)

    header = (
        f"{'corpus':<18} {'engine':<11} {'passages':>9} {'build s':>8} {'(cpu s)':>8} {'build MB':>8} {'load s':>7} "
        f"{'QPS 1':>8} {'QPS batch':>9} {'serve MB':>8} {'recall@5':>8}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        if "error" in r:
            print(f"{r['corpus']:<18} {r['engine']:<11} error: {r['error']}")
            continue
        print(
            f"{r['corpus']:<18} {r['engine']:<11} {r['passages']:>9,} {_fmt(r.get('build_s'), '8.1f')} "
            f"{_fmt(r.get('build_cpu_s'), '8.1f')} {_fmt(r.get('build_peak_mb'), '8.0f')} {_fmt(r.get('load_s'), '7.2f')} "
            f"{_fmt(r.get('qps_single'), '8.1f')} {_fmt(r.get('qps_batched'), '9.1f')} {_fmt(r.get('peak_rss_mb'), '8.0f')} "
            f"{_fmt(r.get('recall@5'), '8.3f')}"
        )
    for r in results:
        if r.get("bound"):
            print(f"note: {r['engine']} on {r['corpus']}: {r['bound']}")
    print("build: JSONL file to searchable index, in its own process (bm25s: tokenize, index, save to the cache;")
    print(
        "  rank-bm25: tokenize, index; it has no persistence, so every process pays it); cpu s: that process's CPU time."
    )
    print("load: a new process opening the cached index (hash the corpus, memory-map). MB: peak RSS of the process.")
    print("recall@5: HotpotQA supporting paragraphs; synthetic: the passage the query was drawn from (found@5).")
    print(
        "bm25s-http: the cached index served by `rlf-deepsearch serve` code on loopback; batch = 64 queries per request."
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    machine = {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()}
    args.out.write_text(json.dumps({"machine": machine, "topk": TOPK, "results": results}, indent=2))
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
