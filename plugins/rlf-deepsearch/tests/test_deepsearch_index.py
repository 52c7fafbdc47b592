"""The BM25 index: recall on HotpotQA's real corpus, the on-disk cache, corpus layouts, batching."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from rlf_deepsearch.corpus import CorpusError, Passage
from rlf_deepsearch.index import BM25Index, IndexParams
from rlf_deepsearch.search import Batcher, format_passages

RECALL_FLOORS = {2: 0.55, 5: 0.72, 10: 0.88}
"""Measured with the default settings (k1 1.5, b 0.75, English stemmer and stopwords) on the 250
visible questions: recall@2 0.582, @5 0.760, @10 0.922. The floors sit a little below."""


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def hotpot(shared_data, tmp_path_factory):
    """The HotpotQA index, built once per session in a shared cache folder, then loaded."""
    root = shared_data / "qa/hotpotqa"
    index = BM25Index.open(root / "corpus.jsonl", tmp_path_factory.getbasetemp() / "deepsearch-index")
    questions = [json.loads(line) for line in (root / "questions.jsonl").read_text().splitlines()]
    return index, questions


def test_recall_of_supporting_paragraphs(hotpot):
    index, questions = hotpot
    assert len(index) == 4858
    hits = index.search([q["question"] for q in questions], topk=10)
    for k, floor in RECALL_FLOORS.items():
        recall = sum(len(set(q["supporting_ids"]) & {p.id for p in row[:k]}) / 2 for q, row in zip(questions, hits))
        recall /= len(questions)
        print(f"HotpotQA recall@{k} of the supporting paragraphs: {recall:.3f} (floor {floor})")
        assert recall >= floor


def test_passages_come_back_whole_and_ranked(hotpot):
    index, _questions = hotpot
    [row] = index.search(["Kiss and Tell 1945 film Corliss Archer"], topk=3)
    assert row[0].title == "Kiss and Tell (1945 film)" and row[0].id == "hp02432"
    assert "Shirley Temple" in row[0].text
    assert [p.score for p in row] == sorted((p.score for p in row), reverse=True) and row[-1].score > 0
    assert index.search(["qqqzzzx"], topk=3) == [[]]  # no known term: nothing, not random passages
    assert index.search([], topk=3) == []


def test_index_is_cached_by_corpus_content_and_params(tmp_path, monkeypatch):
    corpus = _write(
        tmp_path / "c.jsonl",
        [{"id": "a", "title": "Cats", "text": "Cats purr."}, {"id": "b", "title": "Dogs", "text": "Dogs bark loudly."}],
    )
    cache = tmp_path / "cache"
    first = BM25Index.open(corpus, cache)
    [folder] = list(cache.iterdir())
    assert json.loads((folder / "meta.json").read_text())["passages"] == 2

    def no_build(*_args, **_kwargs):
        raise AssertionError("rebuilt an index that is cached")

    monkeypatch.setattr(BM25Index, "build", classmethod(no_build))
    again = BM25Index.open(corpus, cache)
    assert again.search(["barking dog"], 1)[0][0].id == "b" == first.search(["barking dog"], 1)[0][0].id
    monkeypatch.undo()
    BM25Index.open(corpus, cache, IndexParams(stemmer=None))  # other params: another index
    _write(corpus, [{"id": "c", "title": "Birds", "text": "Birds sing."}])  # changed content: another index
    assert BM25Index.open(corpus, cache).search(["bird"], 3)[0][0].id == "c"
    assert len([p for p in cache.iterdir() if not p.name.count(".tmp-")]) == 3


def test_rebuild_replaces_the_cached_index(tmp_path):
    corpus = _write(tmp_path / "c.jsonl", [{"id": "a", "title": "Cats", "text": "Cats purr."}])
    cache = tmp_path / "cache"
    BM25Index.open(corpus, cache)
    [folder] = list(cache.iterdir())
    (folder / "meta.json").write_text(json.dumps({**json.loads((folder / "meta.json").read_text()), "build_s": -1}))
    rebuilt = BM25Index.open(corpus, cache, rebuild=True)
    assert json.loads((folder / "meta.json").read_text())["build_s"] >= 0  # built anew, in the same place
    assert rebuilt.search(["cat"], 1)[0][0].id == "a" and list(cache.iterdir()) == [folder]


def test_search_r1_corpus_layout_and_missing_ids(tmp_path):
    corpus = _write(
        tmp_path / "wiki.jsonl",
        [
            {"id": "0", "contents": '"Evan Morris"\nEvan Morris was a lobbyist.'},
            {"title": "Nile", "text": "A long river."},
        ],
    )
    index = BM25Index.build(corpus)
    [[hit]] = index.search(["lobbyist"], 5)
    assert (hit.id, hit.title, hit.text) == ("0", "Evan Morris", "Evan Morris was a lobbyist.")
    assert index.search(["river"], 5)[0][0].id == "1"  # no id: its position


@pytest.mark.parametrize(
    "content, message",
    [
        ('{"id": "a", "text": "ok"}\n{"id": "b", "text": \n', "c.jsonl:2: not valid JSON"),
        ('{"id": "a", "body": "x"}\n', "c.jsonl:1: a passage needs a string 'text'"),
        ("\n\n", "has no passages"),
    ],
)
def test_bad_corpus_is_named(tmp_path, content, message):
    (tmp_path / "c.jsonl").write_text(content)
    with pytest.raises(CorpusError, match=message):
        BM25Index.build(tmp_path / "c.jsonl")
    with pytest.raises(CorpusError, match="no such corpus file"):
        BM25Index.open(tmp_path / "missing.jsonl", tmp_path)


def test_format_passages_respects_the_limit():
    long = Passage("1", "Long", "word " * 500)
    text = format_passages([long, Passage("2", "Short", "A short text.")], max_chars=400)
    assert len(text) <= 400
    first, second = text.split("\n")
    assert first.startswith('Doc 1(Title: "Long") word') and first.endswith("...")
    assert second == 'Doc 2(Title: "Short") A short text.'
    assert format_passages([], 400) == "No passages found."


class _Recorder:
    def __init__(self):
        self.batches: list[list[str]] = []

    def search(self, queries, topk):
        self.batches.append(list(queries))
        time.sleep(0.05)  # a slow backend: queries pile up meanwhile
        return [[Passage(q, q, q)] * topk for q in queries]


def test_batcher_groups_concurrent_searches():
    backend = _Recorder()
    batcher = Batcher(backend, batch_size=8)
    results: dict[int, list] = {}
    threads = [
        threading.Thread(target=lambda i=i: results.__setitem__(i, batcher.search(f"q{i}", 2))) for i in range(20)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert all(results[i] == [Passage(f"q{i}", f"q{i}", f"q{i}")] * 2 for i in range(20))
    assert sum(len(b) for b in backend.batches) == 20
    assert max(len(b) for b in backend.batches) == 8 and len(backend.batches) < 20


def test_batcher_keeps_each_request_whole_and_in_its_own_order():
    """Requests of several queries (the server's): a batch never splits one, a request over the batch
    size runs alone, and each caller gets its own queries' passages at its own topk."""
    backend = _Recorder()
    batcher = Batcher(backend, batch_size=8)
    requests = {i: [f"r{i}q{j}" for j in range(n)] for i, n in enumerate([3, 5, 2, 12, 1, 4, 6, 3])}
    results: dict[int, list] = {}
    threads = [
        threading.Thread(target=lambda i=i: results.__setitem__(i, batcher.search_many(requests[i], 1 + i % 3)))
        for i in requests
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    for i, queries in requests.items():
        assert results[i] == [[Passage(q, q, q)] * (1 + i % 3) for q in queries]
    for batch in backend.batches:
        owners = [q.split("q")[0] for q in batch]
        assert all(owners.count(o) == len(requests[int(o[1:])]) for o in set(owners))  # whole requests only
        assert len(batch) <= 8 or len(set(owners)) == 1
    assert batcher.search_many([], 3) == []


def test_batcher_passes_errors_to_each_caller():
    class Broken:
        def search(self, queries, topk):
            raise RuntimeError("index is gone")

    with pytest.raises(RuntimeError, match="index is gone"):
        Batcher(Broken()).search("q", 1)
