"""Search backends (a local BM25 index or a Search-R1 retrieval server), batching, and the result text.

Every backend answers ``search(queries, topk)`` for a batch of queries. Trajectories search one query
at a time and concurrently; :class:`Batcher` turns the queries waiting at a moment into one batch,
which is what makes a shared GPU retriever (e5 + FAISS) efficient.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from rlfcore import TransientToolError

from rlf_deepsearch.corpus import CorpusError, Passage, parse_passage
from rlf_deepsearch.settings import Settings, resolve

DEMO_CORPUS = Path(__file__).parent / "data" / "demo_corpus.jsonl"


class Searcher(Protocol):
    def search(self, queries: list[str], topk: int) -> list[list[Passage]]: ...


class RetrievalError(RuntimeError):
    """A retrieval server answered with an error or with something that is not its API."""


class RemoteSearcher:
    """A client of a retrieval server speaking Search-R1's API.

    ``POST /retrieve`` with ``{"queries": [...], "topk": k, "return_scores": true}`` answers
    ``{"result": [[{"document": {"id", "contents"}, "score"}, ...], ...]}``, one list per query, where
    ``contents`` is ``"Title"\\ntext``. Documents without scores (``return_scores`` false) and documents
    with separate ``title``/``text`` fields are read too.
    """

    def __init__(self, url: str, timeout_s: float = 30.0):
        import httpx

        self.url = url if url.rstrip("/").endswith("/retrieve") else url.rstrip("/") + "/retrieve"
        self._client = httpx.Client(timeout=timeout_s)

    def search(self, queries: list[str], topk: int) -> list[list[Passage]]:
        import httpx

        try:
            response = self._client.post(self.url, json={"queries": queries, "topk": topk, "return_scores": True})
        except httpx.HTTPError as exc:  # refused, reset, timed out: worth a retry
            raise TransientToolError(f"retrieval server {self.url} unreachable: {type(exc).__name__}: {exc}") from exc
        if response.status_code >= 500:
            raise TransientToolError(f"retrieval server {self.url} failed: HTTP {response.status_code}: {response.text[:200]}")
        if response.status_code != 200:
            raise RetrievalError(f"retrieval server {self.url} refused the request: HTTP {response.status_code}: {response.text[:200]}")
        try:
            result = response.json()["result"]
        except (ValueError, KeyError, TypeError):
            raise RetrievalError(f"retrieval server {self.url} answered without a 'result' list: {response.text[:200]}") from None
        if not isinstance(result, list) or len(result) != len(queries):
            raise RetrievalError(f"retrieval server {self.url} answered {len(result) if isinstance(result, list) else result!r} results for {len(queries)} queries")
        return [[_passage(item) for item in hits] for hits in result]

    def close(self) -> None:
        self._client.close()


def _passage(item: Any) -> Passage:
    """One hit of a retrieval server: a passage as the corpus reads it, with the server's score."""
    doc, score = (item["document"], item.get("score", 0.0)) if isinstance(item, dict) and "document" in item else (item, 0.0)
    try:
        passage = parse_passage(doc, "a retrieved document", "")
    except CorpusError as exc:
        raise RetrievalError(str(exc)) from None
    return replace(passage, score=float(score or 0.0))


@dataclass
class _Pending:
    query: str
    topk: int
    done: threading.Event = field(default_factory=threading.Event)
    result: list[Passage] | None = None
    error: BaseException | None = None


class Batcher:
    """Single-query searches from many threads, run as batches of at most ``batch_size``.

    ``workers`` threads each take every query waiting (no added delay: queries pile up while a
    batch runs), search them together and hand each caller its passages or the batch's error.
    """

    def __init__(self, searcher: Searcher, batch_size: int = 64, workers: int = 1):
        self.searcher = searcher
        self.batch_size = batch_size
        self._queue: queue.SimpleQueue[_Pending] = queue.SimpleQueue()
        self._workers = [threading.Thread(target=self._work, daemon=True, name="deepsearch-batcher") for _ in range(workers)]
        for w in self._workers:
            w.start()

    def search(self, query: str, topk: int) -> list[Passage]:
        item = _Pending(query, topk)
        self._queue.put(item)
        item.done.wait()
        if item.error is not None:
            raise item.error
        assert item.result is not None
        return item.result

    def _work(self) -> None:
        while True:
            batch = [self._queue.get()]
            while len(batch) < self.batch_size:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            try:
                k = max(item.topk for item in batch)
                results = self.searcher.search([item.query for item in batch], k)
                for item, passages in zip(batch, results):
                    item.result = passages[: item.topk]
            except Exception as exc:  # every caller of the batch gets the error as its own
                for item in batch:
                    item.error = exc
            for item in batch:
                item.done.set()


def format_passages(passages: list[Passage], max_chars: int) -> str:
    """Passages as Search-R1 shows them (``Doc 1(Title: "...") text``, one per line), cut to fit ``max_chars``.

    Each passage gets an equal share of the limit; a text that does not fit is cut at a word and ends
    in "...".
    """
    if not passages:
        return "No passages found."
    share = max_chars // len(passages)
    lines = []
    for i, p in enumerate(passages, 1):
        head = f'Doc {i}(Title: "{p.title}") '
        room = share - len(head) - 1  # the newline
        text = " ".join(p.text.split())
        if len(text) > room:
            text = text[: max(room - 3, 0)].rsplit(" ", 1)[0] + "..."
        lines.append(head + text)
    return "\n".join(lines)


_SHARED: dict[tuple[Any, ...], Batcher] = {}
_LOCK = threading.Lock()


def shared_searcher(settings: Settings, base: Path) -> Batcher:
    """The process's searcher for these settings: an index is built or loaded once and shared by every
    trajectory (and every run in the process)."""
    from rlf_deepsearch.index import BM25Index, IndexParams

    corpus = resolve(settings.corpus, base) if settings.corpus else DEMO_CORPUS
    index_dir = resolve(settings.index_dir, base) if settings.index_dir else None
    params = IndexParams(k1=settings.k1, b=settings.b, stemmer=settings.stemmer)
    key = (settings.retriever_url, settings.timeout_s) if settings.retriever_url else (corpus, index_dir, params)
    key += (settings.batch_size,)
    with _LOCK:
        if key not in _SHARED:
            if settings.retriever_url:
                searcher: Searcher = RemoteSearcher(settings.retriever_url, settings.timeout_s)
                _SHARED[key] = Batcher(searcher, settings.batch_size, workers=4)
            else:
                _SHARED[key] = Batcher(BM25Index.open(corpus, index_dir, params), settings.batch_size, workers=1)
        return _SHARED[key]
