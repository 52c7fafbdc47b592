"""BM25 over a passage corpus with bm25s, built once and cached on disk.

The cache folder is named after the corpus file's SHA-256 and the index parameters, so a changed
corpus or setting gets a new index and an unchanged one is loaded (memory-mapped: processes on one
node share its pages). Passages are read back from the corpus file by offset, never held in memory.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from rlf_deepsearch.corpus import Corpus, CorpusError, Passage, scan

INDEX_FORMAT = 1
"""Bumped when the files written here change, so old caches are not misread."""


@dataclass(frozen=True)
class IndexParams:
    """What changes the index: BM25's k1 and b, the Snowball stemmer (PyStemmer), English stopwords."""

    k1: float = 1.5
    b: float = 0.75
    stemmer: str | None = "english"
    stopwords: bool = True

    def digest(self) -> str:
        import bm25s

        key = {"format": INDEX_FORMAT, "bm25s": bm25s.__version__, **asdict(self)}
        return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()


def file_digest(path: Path) -> str:
    """SHA-256 of a file, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def publish(tmp: Path, folder: Path, replace: bool = False) -> None:
    """Move a finished build from ``tmp`` to ``folder`` with one rename, so no reader sees half of it.

    A concurrent builder's finished copy wins and ours is dropped; with ``replace`` (a rebuild) the
    folder already there is first moved aside and deleted."""
    if replace and folder.exists():
        old = folder.with_name(f"{folder.name}.old-{os.getpid()}-{threading.get_ident()}")
        folder.rename(old)
        shutil.rmtree(old, ignore_errors=True)
    try:
        tmp.rename(folder)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not folder.is_dir():
            raise


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "rlf-deepsearch"


class BM25Index:
    """A bm25s index and the corpus it was built from. ``search`` is safe to call from many threads."""

    def __init__(self, retriever: Any, corpus: Corpus, params: IndexParams):
        self.retriever = retriever
        self.corpus = corpus
        self.params = params
        self._vocab: dict[str, int] = retriever.vocab_dict
        self._local = threading.local()  # PyStemmer objects must not be shared between threads

    def __len__(self) -> int:
        return len(self.corpus)

    @classmethod
    def build(cls, corpus_path: str | Path, params: IndexParams = IndexParams()) -> BM25Index:
        """Tokenize the corpus as it streams from disk and index it in memory."""
        import bm25s
        from bm25s.tokenization import Tokenizer

        path = Path(corpus_path)
        if not path.is_file():
            raise CorpusError(f"no such corpus file: {path}")
        offsets: list[int] = []

        def texts() -> Iterator[str]:
            for offset, passage in scan(path):
                offsets.append(offset)
                yield f"{passage.title}\n{passage.text}" if passage.title else passage.text

        tokenizer = Tokenizer(stopwords="en" if params.stopwords else None, stemmer=_stemmer(params.stemmer))
        ids = list(tokenizer.streaming_tokenize(texts(), update_vocab=True))
        if not ids:
            raise CorpusError(f"{path}: the corpus has no passages")
        retriever = bm25s.BM25(k1=params.k1, b=params.b, backend="auto")
        retriever.index((ids, tokenizer.get_vocab_dict()), show_progress=False)
        del ids
        return cls(retriever, Corpus(path, np.asarray(offsets, dtype=np.int64)), params)

    def save(self, folder: Path, meta: dict[str, Any] | None = None) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.retriever.save(str(folder), show_progress=False)
        np.save(folder / "offsets.npy", self.corpus.offsets)
        info = {"format": INDEX_FORMAT, "passages": len(self), "params": asdict(self.params), **(meta or {})}
        (folder / "meta.json").write_text(json.dumps(info, indent=2))

    @classmethod
    def load(cls, folder: Path, corpus_path: str | Path, mmap: bool = True) -> BM25Index:
        import bm25s

        meta = json.loads((folder / "meta.json").read_text())
        if meta.get("format") != INDEX_FORMAT:
            raise CorpusError(f"{folder}: index format {meta.get('format')}, this version reads {INDEX_FORMAT}")
        retriever = bm25s.BM25.load(str(folder), mmap=mmap, show_progress=False)
        offsets = np.load(folder / "offsets.npy", mmap_mode="r" if mmap else None)
        return cls(retriever, Corpus(Path(corpus_path), offsets), IndexParams(**meta["params"]))

    @classmethod
    def open(
        cls,
        corpus_path: str | Path,
        cache_dir: str | Path | None = None,
        params: IndexParams = IndexParams(),
        rebuild: bool = False,
    ) -> BM25Index:
        """Load the cached index of this corpus and parameters, building and caching it first if needed
        (or if ``rebuild``, replacing the cached one)."""
        path = Path(corpus_path).resolve()
        if not path.is_file():
            raise CorpusError(f"no such corpus file: {path}")
        digest = file_digest(path)
        folder = Path(cache_dir or default_cache_dir()) / f"{path.stem}-{digest[:16]}-{params.digest()[:8]}"
        if (folder / "meta.json").is_file() and not rebuild:
            return cls.load(folder, path)
        start = time.perf_counter()
        index = cls.build(path, params)
        meta = {"corpus": str(path), "sha256": digest, "build_s": round(time.perf_counter() - start, 3)}
        tmp = folder.with_name(f"{folder.name}.tmp-{os.getpid()}-{threading.get_ident()}")
        index.save(tmp, meta)
        publish(tmp, folder, replace=rebuild)
        index.corpus.close()
        return cls.load(folder, path)

    def search(self, queries: list[str], topk: int) -> list[list[Passage]]:
        """The ``topk`` best passages of each query, best first; passages that match no term are left out."""
        if not queries:
            return []
        k = min(topk, len(self))
        docs, scores = self.retriever.retrieve(
            [self._token_ids(q) for q in queries], k=k, show_progress=False, n_threads=0
        )
        return [
            [replace(self.corpus[int(d)], score=float(s)) for d, s in zip(row_docs, row_scores) if s > 0]
            for row_docs, row_scores in zip(docs, scores)
        ]

    def _token_ids(self, query: str) -> list[int]:
        import bm25s

        stemmer = getattr(self._local, "stemmer", None)
        if stemmer is None and self.params.stemmer:
            stemmer = self._local.stemmer = _stemmer(self.params.stemmer)
        [tokens] = bm25s.tokenize(
            [query],
            stopwords="en" if self.params.stopwords else None,
            stemmer=stemmer,
            return_ids=False,
            show_progress=False,
        )
        ids = [self._vocab[t] for t in tokens if t in self._vocab]
        return ids or [self._vocab[""]]  # no known term: the empty token, which scores every passage 0

    def close(self) -> None:
        self.corpus.close()


def _stemmer(name: str | None) -> Any:
    if not name:
        return None
    try:
        import Stemmer
    except ImportError as exc:
        raise ImportError("stemming needs PyStemmer (pip install PyStemmer), or set stemmer: null") from exc
    try:
        return Stemmer.Stemmer(name)
    except KeyError:
        raise ValueError(f"unknown stemmer {name!r}; PyStemmer knows: {', '.join(Stemmer.algorithms())}") from None
