"""The retrieval service: Search-R1's API served over the local index, and the client that calls it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from rlf_deepsearch.index import BM25Index
from rlf_deepsearch.prepare import to_row
from rlf_deepsearch.search import RemoteSearcher, RetrievalError
from rlf_deepsearch.server import RetrievalServer

from rlfcore import TransientToolError
from rlfcore.testing import rollout

QUERIES = ["Who portrayed Corliss Archer in Kiss and Tell?", "romantic comedy Big Stone Gap director"]


@pytest.fixture
def hotpot(shared_data, tmp_path_factory):
    corpus = shared_data / "qa/hotpotqa/corpus.jsonl"
    index_dir = tmp_path_factory.getbasetemp() / "deepsearch-index"
    return corpus, index_dir, BM25Index.open(corpus, index_dir)


@pytest.fixture
def server(hotpot):
    _, _, index = hotpot
    srv = RetrievalServer(index, "127.0.0.1", 0, topk=3, passages=len(index))
    srv.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def test_client_gets_what_the_local_index_finds(hotpot, server):
    _, _, index = hotpot
    remote = RemoteSearcher(server.url.removesuffix("/retrieve"))  # the /retrieve suffix is optional
    assert remote.url == server.url
    got, want = remote.search(QUERIES, 4), index.search(QUERIES, 4)
    assert [[(p.id, p.title, p.text) for p in row] for row in got] == [
        [(p.id, p.title, p.text) for p in row] for row in want
    ]
    assert [p.score for p in got[0]] == pytest.approx([p.score for p in want[0]])


def test_the_wire_format_is_search_r1s(server):
    body = httpx.post(server.url, json={"queries": QUERIES[:1], "topk": 2, "return_scores": True}).json()
    [[first, _]] = body["result"]
    assert set(first) == {"document", "score"} and first["score"] > 0
    assert first["document"]["id"] == "hp02432"
    assert first["document"]["contents"].startswith('"Kiss and Tell (1945 film)"\nKiss and Tell is a 1945')
    bare = httpx.post(server.url, json={"queries": QUERIES}).json()["result"]  # default topk, no scores
    assert [len(r) for r in bare] == [3, 3] and "contents" in bare[0][0] and "score" not in bare[0][0]
    health = httpx.get(server.url.replace("/retrieve", "/health")).json()
    assert health == {"status": "ok", "passages": 4858}


@pytest.mark.parametrize(
    "payload, message",
    [
        ({"queries": "one"}, "'queries' must be a list of strings"),
        ({"queries": ["a"], "topk": -2}, "'topk' must be an integer from 1 to 1000"),
        ({"queries": ["a"], "return_scores": "yes"}, "'return_scores' must be true or false"),
        ([1, 2], "the body must be an object"),
    ],
)
def test_bad_requests_are_named(server, payload, message):
    response = httpx.post(server.url, json=payload)
    assert response.status_code == 400 and message in response.json()["error"]
    with pytest.raises(RetrievalError, match="404"):
        RemoteSearcher(server.url.replace("/retrieve", "/nowhere/retrieve")).search(["a"], 1)


def test_unreachable_or_failing_server_is_a_transient_error():
    with pytest.raises(TransientToolError, match="unreachable"):
        RemoteSearcher("http://127.0.0.1:9", timeout_s=2).search(["a"], 1)

    class Broken:
        def search(self, queries, topk):
            raise OSError("disk gone")

    srv = RetrievalServer(Broken(), "127.0.0.1", 0)
    srv.start()
    try:
        with pytest.raises(TransientToolError, match="HTTP 500.*disk gone"):
            RemoteSearcher(srv.url).search(["a"], 1)
    finally:
        srv.shutdown()
        srv.server_close()


def test_plugin_searches_through_the_server(shared_data, server):
    q = json.loads((shared_data / "qa/hotpotqa/questions.jsonl").read_text().splitlines()[0])
    call = json.dumps({"name": "search", "arguments": {"query": q["question"]}})
    script = {q["id"]: [f"<tool_call>{call}</tool_call>", f"<answer>{q['answers'][0]}</answer>"]}
    config = {
        "plugins": ["deepsearch"],
        "rollout": {"max_response_tokens": 16384, "max_total_tokens": 32768},
        "deepsearch": {"retriever_url": server.url},
    }
    [t] = rollout(config, [to_row(q, "t", q["id"])], script)
    assert t.reward == 1.0 and t.tool_errors == 0
    assert t.messages[2]["content"].startswith('Doc 1(Title: "Kiss and Tell (1945 film)")')


def test_serve_command(hotpot):
    corpus, index_dir, _ = hotpot
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rlf_deepsearch.cli",
            "serve",
            "--corpus",
            str(corpus),
            "--index-dir",
            str(index_dir),
            "--port",
            "0",
            "--topk",
            "2",
        ],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        url = None
        for line in proc.stderr:
            found = re.search(r"serving 4858 passages at (http://\S+)", line)
            if found:
                url = found.group(1)
                break
        assert url, "the server never said where it listens"
        [row] = RemoteSearcher(url).search(QUERIES[:1], 2)
        assert next(p.id for p in row) == "hp02432"
        assert len(httpx.post(url, json={"queries": ["x y"]}).json()["result"][0]) <= 2
    finally:
        proc.terminate()
        proc.wait(10)


def test_retrieved_documents_are_read_as_corpus_passages():
    from rlf_deepsearch.search import _passage

    hit = _passage({"document": {"id": "7", "contents": '"Paris"\nThe capital of France.'}, "score": 3.5})
    assert (hit.id, hit.title, hit.text, hit.score) == ("7", "Paris", "The capital of France.", 3.5)
    with pytest.raises(RetrievalError, match="a retrieved document: .*'text'.*'contents'"):
        _passage({"document": {"body": "x"}})
