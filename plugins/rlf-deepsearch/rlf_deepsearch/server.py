"""A retrieval server speaking Search-R1's API, so many workers and nodes share one index.

``POST /retrieve`` takes ``{"queries": [...], "topk": k, "return_scores": bool}`` and answers
``{"result": [...]}`` with one list per query: ``{"document": {...}, "score": s}`` items when
``return_scores`` is true, bare documents otherwise (as Search-R1's server does). A document has
Search-R1's ``id`` and ``contents`` (``"Title"\\ntext``) and also ``title`` and ``text``.
``GET /health`` answers ``{"status": "ok", "passages": n}``.

The standard library's threading HTTP server is enough: a BM25 search takes microseconds to a few
milliseconds, and clients batch their queries.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from rlf_deepsearch.corpus import Passage
from rlf_deepsearch.search import Searcher

MAX_BODY = 16 << 20
MAX_TOPK = 1000


class RetrievalServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, searcher: Searcher, host: str = "127.0.0.1", port: int = 8000, topk: int = 3,
                 passages: int | None = None, quiet: bool = True):
        self.searcher = searcher
        self.default_topk = topk
        self.passages = passages
        self.quiet = quiet
        super().__init__((host, port), _Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/retrieve"

    def start(self) -> threading.Thread:
        """Serve in a daemon thread (tests, notebooks); ``shutdown()`` stops it."""
        thread = threading.Thread(target=self.serve_forever, args=(0.05,), daemon=True, name="deepsearch-server")
        thread.start()
        return thread


class BadRequest(ValueError):
    pass


def parse_request(body: bytes, default_topk: int) -> tuple[list[str], int, bool]:
    """The queries, top-k and return_scores of a ``/retrieve`` body; BadRequest names what is wrong."""
    try:
        data = json.loads(body or b"null")
    except json.JSONDecodeError as exc:
        raise BadRequest(f"the body is not JSON: {exc.msg}") from None
    if not isinstance(data, dict):
        raise BadRequest('the body must be an object {"queries": [...], "topk": k, "return_scores": bool}')
    queries = data.get("queries")
    if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
        raise BadRequest(f"'queries' must be a list of strings, got {queries!r:.80}")
    topk = data.get("topk") or default_topk
    if not isinstance(topk, int) or isinstance(topk, bool) or not 1 <= topk <= MAX_TOPK:
        raise BadRequest(f"'topk' must be an integer from 1 to {MAX_TOPK}, got {topk!r}")
    scores = data.get("return_scores", False)
    if not isinstance(scores, bool):
        raise BadRequest(f"'return_scores' must be true or false, got {scores!r}")
    return queries, topk, scores


def document(p: Passage) -> dict[str, Any]:
    return {"id": p.id, "contents": p.contents, "title": p.title, "text": p.text}


class _Handler(BaseHTTPRequestHandler):
    server: RetrievalServer
    protocol_version = "HTTP/1.1"  # keep-alive: clients reuse their connection
    disable_nagle_algorithm = True  # headers and body go out as two writes: no 40 ms delayed-ACK stall

    def do_GET(self) -> None:  # noqa: N802 - the http.server naming
        if self.path.rstrip("/") != "/health":
            return self._send(404, {"error": f"no route GET {self.path}; use POST /retrieve or GET /health"})
        self._send(200, {"status": "ok", "passages": self.server.passages})

    def do_POST(self) -> None:  # noqa: N802
        if self.path.rstrip("/") != "/retrieve":
            return self._send(404, {"error": f"no route POST {self.path}; use POST /retrieve"})
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            return self._send(413, {"error": f"the body has {length} bytes, at most {MAX_BODY} are read"})
        try:
            queries, topk, scores = parse_request(self.rfile.read(length), self.server.default_topk)
        except BadRequest as exc:
            return self._send(400, {"error": str(exc)})
        try:
            hits = self.server.searcher.search(queries, topk)
        except Exception as exc:  # the client gets the reason; the server keeps serving
            return self._send(500, {"error": f"search failed: {type(exc).__name__}: {exc}"})
        if scores:
            result = [[{"document": document(p), "score": p.score} for p in row] for row in hits]
        else:
            result = [[document(p) for p in row] for row in hits]
        self._send(200, {"result": result})

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        body = json.dumps(payload, ensure_ascii=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        if not self.server.quiet:
            super().log_message(format, *args)
