"""The retrieval server holds 256 concurrent clients on loopback, and batches their queries."""

from __future__ import annotations

import asyncio
import ssl
import threading

import httpx
from rlf_deepsearch.index import BM25Index
from rlf_deepsearch.search import DEMO_CORPUS
from rlf_deepsearch.server import RetrievalServer

QUERIES = ["red planet", "highest mountain", "longest river", "radioactivity", "largest ocean", "hottest planet"]


class Counting:
    """The real BM25 index, with a count of the batches it is asked for."""

    def __init__(self, index: BM25Index):
        self.index, self.calls, self.queries = index, 0, 0
        self._lock = threading.Lock()

    def search(self, queries, topk):
        with self._lock:
            self.calls += 1
            self.queries += len(queries)
        return self.index.search(queries, topk)


async def _clients(url: str, n: int, each: int) -> list[tuple[str, int, list[str]]]:
    tls = ssl.create_default_context()  # one for all: httpx builds one per client otherwise, ~0.3 s each

    async def one(c: int) -> list[tuple[str, int, list[str]]]:
        out = []
        async with httpx.AsyncClient(timeout=30.0, limits=httpx.Limits(max_connections=1), verify=tls) as http:
            for r in range(each):
                query = QUERIES[(c + r) % len(QUERIES)]
                response = await http.post(url, json={"queries": [query], "topk": 2, "return_scores": True})
                ids = (
                    [hit["document"]["id"] for hit in response.json()["result"][0]]
                    if response.status_code == 200
                    else []
                )
                out.append((query, response.status_code, ids))
        return out

    rows = await asyncio.gather(*(one(c) for c in range(n)))
    return [r for row in rows for r in row]


def test_256_concurrent_clients_get_their_own_answers_in_batches(tmp_path):
    index = BM25Index.open(DEMO_CORPUS, tmp_path)
    counting = Counting(index)
    server = RetrievalServer(counting, port=0, passages=len(index), batch_size=256)
    server.start()
    try:
        answers = asyncio.run(_clients(server.url, 256, 3))
    finally:
        server.shutdown()
        server.server_close()
    assert len(answers) == 768 and {status for _, status, _ in answers} == {200}
    expected = {q: [p.id for p in hits] for q, hits in zip(QUERIES, index.search(QUERIES, 2))}
    assert all(ids == expected[query] for query, _, ids in answers)  # each client got its own query's passages
    assert counting.queries == 768
    assert counting.calls < 768  # concurrent requests were searched together
