"""The retrieval server's limits, over real sockets on loopback: each answered with a clear HTTP error,
none able to make the server read without end, build an unbounded answer or hold unbounded threads."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time

import httpx
import pytest
from rlf_deepsearch.corpus import Passage
from rlf_deepsearch.server import MAX_HITS, MAX_QUERIES, RetrievalServer


class Echo:
    """Searcher whose passages are ``size`` bytes each: answers grow with queries x topk."""

    def __init__(self, size: int = 100):
        self.size = size

    def search(self, queries, topk):
        return [[Passage(str(i), "T", "x" * self.size, 1.0) for i in range(topk)] for _ in queries]


@pytest.fixture
def make_server():
    servers = []

    def make(**kw):
        srv = RetrievalServer(kw.pop("searcher", Echo()), "127.0.0.1", 0, **kw)
        srv.start()
        servers.append(srv)
        return srv

    yield make
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def raw(srv: RetrievalServer, data: bytes, timeout: float = 5.0) -> bytes:
    """Send raw bytes, read until the server closes or the timeout."""
    with socket.create_connection(srv.server_address[:2], timeout=timeout) as s:
        s.sendall(data)
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except TimeoutError:
            pass
    return out


@pytest.mark.parametrize(
    "length, expect",
    [
        ("-5", b"Content-Length is '-5', not a non-negative integer"),
        ("abc", b"Content-Length is 'abc', not a non-negative integer"),
        ("99999999999", b"at most 16777216 are read"),
    ],
)
def test_bad_content_length_is_refused_and_the_connection_closed(make_server, length, expect):
    srv = make_server()
    start = time.perf_counter()
    out = raw(srv, f"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n".encode() + b"x" * 1000)
    assert out.split(b"\r\n")[0] in (b"HTTP/1.1 400 Bad Request", b"HTTP/1.1 413 Request Entity Too Large")
    assert expect in out and b"Connection: close" in out
    assert time.perf_counter() - start < 4  # closed by the server, not by our timeout


def test_missing_content_length_is_refused(make_server):
    out = raw(make_server(), b"POST /retrieve HTTP/1.1\r\nHost: x\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 400") and b"Content-Length is missing" in out


NESTED = b'{"queries": ' + b"[" * 500 + b'"q"' + b"]" * 500 + b"}"  # deep, but within the parser's limit


@pytest.mark.parametrize(
    "body, message",
    [
        (b'{"queries": ["a"', "the body is not JSON: Expecting"),
        (b"[" * 100_000, "the body nests too deep to parse"),
        (NESTED, "'queries' must be a list of strings, item 0 is a list of 1 items"),
        (b'{"queries": ["caf\xe9"]}', "the body is not UTF-8: byte 17 is b'\\xe9'"),
        (b'{"queries": ["\xff\xfe"]}', "the body is not UTF-8: byte 14"),
        (b'{"queries": ["\\ud800"]}', "query 0 holds a lone surrogate"),
        (b'{"queries": ["a"], "topk": ' + b"9" * 5000 + b"}", "the body is not usable JSON: Exceeds the limit"),
        (b'{"queries": [1, 2]}', "'queries' must be a list of strings, item 0 is 1"),
        (b'{"queries": {"a": 1}}', "'queries' must be a list of strings, got an object of 1 items"),
        (b'{"queries": ["a"], "topk": "3"}', "'topk' must be an integer from 1 to 1000, got the string \"3\""),
        (b'{"queries": ["a"], "topk": []}', "'topk' must be an integer from 1 to 1000, got a list of 0 items"),
        (b'{"queries": ["a"], "topk": 2.5}', "'topk' must be an integer from 1 to 1000, got 2.5"),
        (b'{"queries": ["a"], "topk": true}', "'topk' must be an integer from 1 to 1000, got true"),
        (b'{"queries": ["a"], "return_scores": 1}', "'return_scores' must be true or false, got 1"),
        (b'"queries"', "the body must be an object"),
    ],
)
def test_malformed_bodies_get_400_with_a_json_error_and_the_connection_stays(make_server, body, message):
    srv = make_server()
    conn = http.client.HTTPConnection(*srv.server_address[:2], timeout=5)
    try:
        conn.request("POST", "/retrieve", body, {"Content-Type": "application/json"})
        response = conn.getresponse()  # before: RemoteDisconnected, the server dropped the connection
        assert response.status == 400 and response.getheader("Content-Type") == "application/json"
        assert message in json.loads(response.read())["error"]
        conn.request("POST", "/retrieve", json.dumps({"queries": ["q"], "topk": 0}))  # 0: the default topk
        again = conn.getresponse()
        assert again.status == 200 and [len(r) for r in json.loads(again.read())["result"]] == [3]
    finally:
        conn.close()


def test_requests_and_answers_are_bounded(make_server):
    srv = make_server(max_answer_bytes=1 << 20)
    too_many = httpx.post(srv.url, json={"queries": ["q"] * (MAX_QUERIES + 1), "topk": 1})
    assert too_many.status_code == 413 and f"at most {MAX_QUERIES}" in too_many.json()["error"]
    too_wide = httpx.post(srv.url, json={"queries": ["q"] * 100, "topk": 1000})
    assert too_wide.status_code == 413 and f"at most {MAX_HITS} per request" in too_wide.json()["error"]
    big = httpx.post(srv.url, json={"queries": ["q"] * 40, "topk": 500})  # 20,000 passages of 100 bytes: > 1 MiB
    assert big.status_code == 507 and "exceed 1048576 bytes" in big.json()["error"]
    fits = httpx.post(srv.url, json={"queries": ["q"] * 4, "topk": 10})
    assert fits.status_code == 200 and [len(r) for r in fits.json()["result"]] == [10] * 4


def test_a_stalled_client_gets_408_and_idle_connections_are_closed(make_server):
    srv = make_server(timeout_s=0.5)
    start = time.perf_counter()
    out = raw(srv, b'POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"queries"')
    assert out.startswith(b"HTTP/1.1 408") and b"within 0.5 s" in out
    idle = raw(srv, b"")  # connects, sends nothing: closed after the timeout
    assert idle == b"" and time.perf_counter() - start < 4


def _connection_threads(earlier: frozenset[threading.Thread] = frozenset()) -> int:
    """Threads serving a connection (the standard library names them after their target), leaving out
    those in ``earlier``: other tests' servers may still be closing theirs."""
    return sum("process_request_thread" in t.name and t not in earlier for t in threading.enumerate())


def test_connections_beyond_the_limit_get_503_and_threads_stay_bounded(make_server):
    srv = make_server(max_connections=8, timeout_s=3)
    before = threading.active_count()
    earlier = frozenset(threading.enumerate())  # the objects, not their idents, which the OS reuses
    held = [socket.create_connection(srv.server_address[:2]) for _ in range(8)]
    try:
        deadline = time.time() + 10  # the server accepts on its own thread: on a loaded machine, later
        while _connection_threads(earlier) < 8 and time.time() < deadline:
            time.sleep(0.05)
        assert _connection_threads(earlier) == 8
        refused = raw(srv, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert refused.startswith(b"HTTP/1.1 503") and b"holds 8 connections at most" in refused
        assert _connection_threads(earlier) == 8  # the refused one got no thread
    finally:
        for s in held:
            s.close()
    deadline = time.time() + 3
    while threading.active_count() > before and time.time() < deadline:
        time.sleep(0.05)
    assert httpx.get(srv.url.replace("/retrieve", "/health")).json()["status"] == "ok"  # slots came back
    assert (
        json.loads(raw(srv, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").split(b"\r\n\r\n", 1)[1])[
            "status"
        ]
        == "ok"
    )
