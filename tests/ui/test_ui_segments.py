"""``rlf ui`` on agent episodes: the sample page lists an episode's segments (why each began, its token
counts) and its answer, the token view shows each segment's tokens under its reason with a boundary
between them, and ordinary records, old ones without the agent fields included, render as before.

The run folder is made as tests/support/ui.py makes the route tests' own (a real BPE tokenizer, records
from ``Trajectory.record()``), with token ids encoded from known texts so the decoded tokens can be checked.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("starlette")
pytest.importorskip("tokenizers")

from rlfcore.chat import HFChatTokenizer
from rlfcore.loop import Trajectory
from tests.support.ui import BASE, TOKEN, build_tokenizer, write_run

FIRST = "first request"
REWRITTEN = "the history was rewritten at message 0 (user)"
HOSTILE = "<script>alert(1)</script>"
CALL = "tool call add"
OBSERVED = "<tool_response>5</tool_response>"
ANSWER = "the answer is 5"
FRESH = "Wait for it."


def tokens_of(tok: HFChatTokenizer, prompt: str, parts: list[tuple[str, int]]) -> dict[str, Any]:
    """A segment's token fields: ``prompt`` rendered as a user turn, then each (text, mask) part."""
    prompt_ids = tok.encode(tok.render([{"role": "user", "content": prompt}], None, True))
    response_ids: list[int] = []
    mask: list[int] = []
    for text, m in parts:
        ids = tok.encode(text)
        response_ids += ids
        mask += [m] * len(ids)
    logprobs = [-0.5 if m else 0.0 for m in mask]
    return {"prompt_ids": prompt_ids, "response_ids": response_ids, "response_mask": mask, "logprobs": logprobs}


def record(row: str, own: dict[str, Any], **agent: Any) -> dict[str, Any]:
    """A scored trajectory's JSON line, as ``RunDir`` writes it."""
    messages = [{"role": "user", "content": "What is 2+3?"}, {"role": "assistant", "content": "5"}]
    traj = Trajectory(id=f"{row}#0", row_id=row, env=None, messages=messages, stop_reason="answer", **own, **agent)
    return traj.record()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One run: an agent episode of two segments, an ordinary record, an old one, a hostile episode."""
    base = tmp_path_factory.mktemp("ui-episodes")
    tok = build_tokenizer(base / "model")
    first = {"reason": FIRST, **tokens_of(tok, "What is 2+3?", [(CALL, 1), (OBSERVED, 0), ("done", 1)])}
    own = tokens_of(tok, FRESH, [(ANSWER, 1)])
    agent = record("agent", own, answer=ANSWER, segment_reason=REWRITTEN, segments=[first])
    plain = record("plain", tokens_of(tok, "What is 4+4?", [("8", 1)]))
    old = {k: v for k, v in plain.items() if k not in ("answer", "segment_reason", "segments")}
    old.update(id="old#0", row_id="old")
    hostile = record("evil", own, answer=HOSTILE, segment_reason=HOSTILE, segments=[{**first, "reason": HOSTILE}])
    runs = base / "runs"
    write_run(runs / "agents", [[agent, plain, old, hostile]], base / "model")
    return {"runs": runs, "first": first, "own": own}


@pytest.fixture()
def client(world: dict[str, Any]) -> Iterator[Any]:
    from starlette.testclient import TestClient

    from rlfcore.ui import create_app

    with TestClient(create_app(world["runs"], token=TOKEN), base_url=BASE, headers={"X-RLF-Token": TOKEN}) as c:
        yield c


def counts(fields: dict[str, Any]) -> tuple[int, int, int]:
    """A segment's prompt, generated and observed token counts, from its token fields."""
    generated = sum(fields["response_mask"])
    return len(fields["prompt_ids"]), generated, len(fields["response_ids"]) - generated


def section(page: str, number: int) -> str:
    """The token view's section of segment ``number``."""
    found = re.search(rf'<section class="segment" id="segment-{number}".*?</section>', page, re.S)
    assert found, f"no section for segment {number}"
    return found.group(0)


def spans(part: str) -> list[tuple[str, str]]:
    """(part, text) of each token span in ``part`` of a page."""
    return [
        (p, html.unescape(t))
        for p, t in re.findall(r'<span id="[^"]*" class="tok (\w+)[^"]*"[^>]*>(.*?)</span>', part, re.S)
    ]


def test_sample_page_lists_every_segment_with_its_reason_and_counts(client: Any, world: dict[str, Any]) -> None:
    page = client.get("/sample?run=agents&i=0").text
    assert "<h3>Segments</h3>" in page
    rows = re.findall(r'<tr class="segment( last)?" data-segment="(\d)">(.*?)</tr>', page, re.S)
    assert [(last, n) for last, n, _ in rows] == [("", "1"), (" last", "2")]
    for (_, _, row), reason, fields in zip(rows, (FIRST, REWRITTEN), (world["first"], world["own"])):
        assert html.escape(reason) in row
        cells = [int(c) for c in re.findall(r"<td>(\d+)</td>", row)]
        assert tuple(cells[-3:]) == counts(fields), row
    assert "last: this record's own tokens" in rows[1][2]
    assert "<th>Agent's answer</th>" in page
    assert f'<pre class="answer">{ANSWER}</pre>' in page


def test_token_view_shows_each_segments_tokens_under_its_reason(client: Any, world: dict[str, Any]) -> None:
    page = client.get("/tokens?run=agents&i=0").text
    assert "in 2 segments" in page
    one, two = section(page, 1), section(page, 2)
    assert page.index(one) < page.index(two)  # in order, the record's own last
    assert f"Segment 1 of 2 · {FIRST}</h3>" in one
    assert f"Segment 2 of 2 (last: the record's own tokens) · {html.escape(REWRITTEN)}</h3>" in two
    first_text = "".join(t for _, t in spans(one))
    assert "What is 2+3?" in first_text and CALL in first_text and OBSERVED in first_text
    assert FRESH not in first_text and ANSWER not in first_text
    own_text = "".join(t for _, t in spans(two))
    assert FRESH in own_text and ANSWER in own_text and CALL not in own_text
    for part, fields in ((one, world["first"]), (two, world["own"])):
        kinds = [k for k, _ in spans(part)]
        assert (kinds.count("prompt"), kinds.count("generated"), kinds.count("observation")) == counts(fields)
    assert "".join(t for k, t in spans(one) if k == "observation") == OBSERVED
    assert 'id="seg-1-tok-0"' in one and 'id="tok-0"' in two  # the record's own keep their anchors


@pytest.mark.parametrize("i", [1, 2], ids=["ordinary", "old record"])
def test_an_ordinary_record_shows_no_segments(client: Any, i: int) -> None:
    sample = client.get(f"/sample?run=agents&i={i}").text
    assert "egment" not in sample and "Agent's answer" not in sample
    view = client.get(f"/tokens?run=agents&i={i}").text
    assert "egment" not in view
    assert view.count('<div class="tokens">') == 1 and spans(view)


def test_reasons_and_answers_from_agents_are_escaped(client: Any) -> None:
    escaped = html.escape(HOSTILE, quote=False)
    for url in ("/sample?run=agents&i=3", "/tokens?run=agents&i=3"):
        page = client.get(url).text
        assert HOSTILE not in page and "<script>alert" not in page, url
        assert escaped in page, url
    assert client.get("/sample?run=agents&i=3").text.count(escaped) == 3  # two reasons, the answer
