"""A retrieval server speaking Search-R1's API, so many workers and nodes share one index.

``POST /retrieve`` takes ``{"queries": [...], "topk": k, "return_scores": bool}`` and answers
``{"result": [...]}`` with one list per query: ``{"document": {...}, "score": s}`` items when
``return_scores`` is true, bare documents otherwise (as Search-R1's server does). A document has
Search-R1's ``id`` and ``contents`` (``"Title"\\ntext``) and also ``title`` and ``text``.
``GET /health`` answers ``{"status": "ok", "passages": n}``.

The standard library's threading HTTP server is enough: a BM25 search takes microseconds to a few
milliseconds, and a dense one is dominated by the encoder, which runs best on many queries at once.
So the queries of requests that arrive together are searched as one batch (at most ``batch_size``
queries; 0 turns batching off): one connection thread per client, one search thread. Its limits, each answered with an HTTP error that
names it (and all settable on :class:`RetrievalServer`):

- a body of at most ``MAX_BODY`` bytes, with a valid ``Content-Length`` (400 when it is missing on a
  body, negative or not a number; 413 when too large);
- a body that is UTF-8 JSON of the API's shape: anything else (invalid UTF-8, invalid JSON, nesting
  past the parser's limit, wrong types) is a 400 with a JSON error, on a connection that stays open;
- at most ``MAX_QUERIES`` queries and ``MAX_HITS`` passages (queries x topk) per request (413), and an
  answer of at most ``max_answer_bytes`` (507: passages that large do not fit one answer);
- a socket timeout of ``timeout_s`` on every read and write (an idle keep-alive connection is closed
  after it, a client that stalls mid-request gets 408);
- at most ``max_connections`` connections (threads) at once; one more is answered 503 and closed.
"""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from rlf_deepsearch.corpus import Passage
from rlf_deepsearch.search import Batched, Searcher

MAX_BODY = 16 << 20
MAX_TOPK = 1000
MAX_QUERIES = 4096
MAX_HITS = 50_000
MAX_ANSWER = 64 << 20
TIMEOUT_S = 30.0
MAX_CONNECTIONS = 512
BATCH_SIZE = 256


class RetrievalServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # connections the kernel holds before accept; 256 clients connect at once

    def __init__(
        self,
        searcher: Searcher,
        host: str = "127.0.0.1",
        port: int = 8000,
        topk: int = 3,
        passages: int | None = None,
        quiet: bool = True,
        timeout_s: float = TIMEOUT_S,
        max_connections: int = MAX_CONNECTIONS,
        max_answer_bytes: int = MAX_ANSWER,
        batch_size: int = BATCH_SIZE,
    ):
        self.searcher: Searcher = Batched(searcher, batch_size) if batch_size > 0 else searcher
        self.default_topk = topk
        self.passages = passages
        self.quiet = quiet
        self.timeout_s = timeout_s
        self.max_connections = max_connections
        self.max_answer_bytes = max_answer_bytes
        self._slots = threading.BoundedSemaphore(max_connections)
        super().__init__((host, port), _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        """One thread per connection, up to ``max_connections``; beyond, a 503 and the door closed."""
        if not self._slots.acquire(blocking=False):
            _refuse(request, self.max_connections)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}/retrieve"  # an AF_INET address: its host is a str

    def start(self) -> threading.Thread:
        """Serve in a daemon thread (tests, notebooks); ``shutdown()`` stops it."""
        thread = threading.Thread(target=self.serve_forever, args=(0.05,), daemon=True, name="deepsearch-server")
        thread.start()
        return thread


class BadRequest(ValueError):
    """The request is not Search-R1's API; answered 400."""


class TooLarge(BadRequest):
    """The request asks for more than the server's limits; answered 413."""


def _refuse(request: socket.socket, limit: int) -> None:
    body = json.dumps({"error": f"the server holds {limit} connections at most; retry later"}).encode()
    head = f"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\nRetry-After: 1\r\n\r\n"
    try:
        request.settimeout(1.0)
        request.sendall(head.encode() + body)
    except OSError:
        pass


def parse_request(body: bytes, default_topk: int) -> tuple[list[str], int, bool]:  # noqa: PLR0912 - one check per way a request body can be malformed
    """The queries, top-k and return_scores of a ``/retrieve`` body; BadRequest names what is wrong.

    Every malformed body (not UTF-8, not JSON, nested past the parser's recursion limit, numbers too
    long to convert, wrong types) is a BadRequest, so the client gets a 400 rather than a dropped
    connection; values are described by type, never echoed whole (a deep value's repr recurses too)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequest(f"the body is not UTF-8: byte {exc.start} is {body[exc.start : exc.start + 1]!r}") from None
    try:
        data = json.loads(text or "null")
    except json.JSONDecodeError as exc:
        raise BadRequest(f"the body is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise BadRequest("the body nests too deep to parse; the API needs an object of lists and strings") from None
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        raise BadRequest(f"the body is not usable JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadRequest('the body must be an object {"queries": [...], "topk": k, "return_scores": bool}')
    queries = data.get("queries")
    if not isinstance(queries, list):
        raise BadRequest(f"'queries' must be a list of strings, got {_kind(queries)}")
    for i, q in enumerate(queries):
        if not isinstance(q, str):
            raise BadRequest(f"'queries' must be a list of strings, item {i} is {_kind(q)}")
        try:
            q.encode("utf-8")
        except UnicodeEncodeError:
            raise BadRequest(f"query {i} holds a lone surrogate escape (\\ud800-\\udfff): not text") from None
    topk = data.get("topk")
    if topk is None or (type(topk) is int and topk == 0):  # as Search-R1's server: absent or 0 = the default
        topk = default_topk
    if not isinstance(topk, int) or isinstance(topk, bool) or not 1 <= topk <= MAX_TOPK:
        raise BadRequest(f"'topk' must be an integer from 1 to {MAX_TOPK}, got {_kind(topk)}")
    if len(queries) > MAX_QUERIES:
        raise TooLarge(f"{len(queries)} queries in one request; at most {MAX_QUERIES}")
    if len(queries) * topk > MAX_HITS:
        raise TooLarge(
            f"{len(queries)} queries x topk {topk} = {len(queries) * topk} passages; at most {MAX_HITS} per request"
        )
    scores = data.get("return_scores", False)
    if not isinstance(scores, bool):
        raise BadRequest(f"'return_scores' must be true or false, got {_kind(scores)}")
    return queries, topk, scores


def _kind(value: Any) -> str:
    """A short, safe description of a JSON value for an error: scalars shown, containers by type."""
    if value is None or isinstance(value, (bool, int, float)):
        return json.dumps(value)[:40]
    if isinstance(value, str):
        return f"the string {json.dumps(value)[:40]}"
    return f"{'an object' if isinstance(value, dict) else 'a list'} of {len(value)} items"


def document(p: Passage) -> dict[str, Any]:
    return {"id": p.id, "contents": p.contents, "title": p.title, "text": p.text}


class _Handler(BaseHTTPRequestHandler):
    server: RetrievalServer
    protocol_version = "HTTP/1.1"  # keep-alive: clients reuse their connection
    disable_nagle_algorithm = True  # headers and body go out as two writes: no 40 ms delayed-ACK stall

    def do_GET(self) -> None:
        if self.path.rstrip("/") != "/health":
            return self._send(404, {"error": f"no route GET {self.path}; use POST /retrieve or GET /health"})
        self._send(200, {"status": "ok", "passages": self.server.passages})

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.timeout_s)  # every read and write of this connection

    def do_POST(self) -> None:
        if self.path.rstrip("/") != "/retrieve":
            return self._send(404, {"error": f"no route POST {self.path}; use POST /retrieve"})
        declared = self.headers.get("Content-Length")
        if declared is None or not declared.strip().isdigit():
            self.close_connection = True  # the body's end is unknown: this connection cannot go on
            problem = "is missing" if declared is None else f"is {declared[:40]!r}, not a non-negative integer"
            return self._send(400, {"error": f"Content-Length {problem}; send the JSON body with its length"})
        length = int(declared)
        if length > MAX_BODY:
            self.close_connection = True
            return self._send(413, {"error": f"the body has {length} bytes, at most {MAX_BODY} are read"})
        try:
            body = self.rfile.read(length)
        except TimeoutError:
            self.close_connection = True
            return self._send(408, {"error": f"the body did not arrive within {self.server.timeout_s:g} s"})
        try:
            queries, topk, scores = parse_request(body, self.server.default_topk)
        except TooLarge as exc:
            return self._send(413, {"error": str(exc)})
        except BadRequest as exc:
            return self._send(400, {"error": str(exc)})
        try:
            hits = self.server.searcher.search(queries, topk)
        except Exception as exc:  # the client gets the reason; the server keeps serving
            return self._send(500, {"error": f"search failed: {type(exc).__name__}: {exc}"})
        parts, size = [], 0
        for row in hits:  # row by row, so an answer over the bound is refused before it is all built
            items = [{"document": document(p), "score": p.score} if scores else document(p) for p in row]
            parts.append(json.dumps(items, ensure_ascii=False).encode())
            size += len(parts[-1]) + 1
            if size > self.server.max_answer_bytes:
                return self._send(
                    507,
                    {
                        "error": f"the answer would exceed {self.server.max_answer_bytes} bytes; "
                        "ask for fewer queries or a smaller topk"
                    },
                )
        self._send(200, body=b'{"result": [' + b",".join(parts) + b"]}")

    def _send(self, status: int, payload: dict[str, Any] | None = None, body: bytes | None = None) -> None:
        if body is None:
            body = json.dumps(payload).encode()  # ASCII: an error may quote a client's lone surrogate
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        if not self.server.quiet:
            super().log_message(format, *args)
