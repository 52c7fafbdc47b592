"""``rlf ui`` renders what run folders hold as text, never as markup: stored XSS in every field.

Two run folders, named by the payloads themselves (one nested two levels down, so that its name holds
the ``/`` of ``</script>``), hold them in every field a page shows: metrics keys and values, log lines,
config values, the dataset, and each trajectory's ids, prompt, response, reasoning, tool call and
result, ground truth, reward components, errors and template check. Files are written in the format
``RunDir`` writes, with a real BPE tokenizer in the checkpoint for the token view. Every page, partial
and error page must show each field (so the check is not vacuous) and hold no tag, handler or script
that the payloads would have made.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette")
pytest.importorskip("tokenizers")
from markupsafe import escape
from starlette.testclient import TestClient

from rlfcore.ui import create_app

TOKEN = "escaping-test-token-0123456789"
BASE = "http://127.0.0.1:8765"
SCRIPT = "<script>alert(1)</script>"
IMG = '"><img src=x onerror=alert(1)>'
NESTED = ("<script>alert(1)<", "script>")  # two folders: the run's name is "<script>alert(1)</script>"
RUNS = (IMG, "/".join(NESTED))


def evil(tag: str) -> str:
    """A field's value: a plain tag that finds it on a page, then both payloads."""
    return f"{tag}{SCRIPT}{IMG}"


def record(k: int, ids: dict[str, list[int]]) -> dict[str, Any]:
    """A trajectory as ``Trajectory.record()`` writes it, every text field holding the payloads."""
    call_id = evil("tagcallid")
    return {
        "id": f"{evil('tagid')}#{k}",
        "row_id": evil("tagrow"),
        "env": evil("tagenv"),
        "messages": [
            {"role": "system", "content": evil("tagsystem")},
            {"role": "user", "content": evil("tagprompt")},
            {
                "role": "assistant",
                "content": evil("tagcallturn"),
                "reasoning_content": evil("tagreasoning"),
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": evil("tagtoolname"), "arguments": {evil("tagargkey"): evil("tagargs")}},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": call_id, "content": evil("tagresult"), "error": evil("tagtoolerror")},
            {"role": "assistant", "content": evil("tagresponse")},
        ],
        **ids,
        "logprobs": [-0.5] * len(ids["response_ids"]),
        "num_turns": 2,
        "tool_calls": 1,
        "tool_errors": 1,
        "tool_error_kinds": {evil("tagerrorkind"): 1},
        "stop_reason": evil("tagstop"),
        "truncated": False,
        "error": evil("tagerror"),
        "template_mismatch": evil("tagmismatch"),
        "generate_s": 0.1,
        "tools_s": 0.01,
        "ground_truth": {"answer": evil("tagtruth")},
        "extra": {evil("tagextrakey"): evil("tagextra")},
        "reward": float(k % 2),
        "reward_components": {evil("tagcomponent"): float(k % 2)},
        "reward_error": evil("tagrewarderror"),
        "answer": evil("taganswer"),
        "prompt_tokens": len(ids["prompt_ids"]),
        "response_tokens": len(ids["response_ids"]),
        "generated_tokens": len(ids["response_ids"]),
    }


def write_run(folder: Path, tokenizer: Path, ids: dict[str, list[int]]) -> None:
    """A run folder as ``rlf train`` leaves it: config, metrics, a step's samples, a checkpoint's tokenizer,
    a log and a summary; and the dataset its config names, for the data page."""
    folder.mkdir(parents=True)
    model = folder / "checkpoints" / "step_000001" / "model"
    model.mkdir(parents=True)
    for f in tokenizer.iterdir():
        (model / f.name).write_bytes(f.read_bytes())
    data = f"{IMG}.jsonl"
    (folder / data).write_text(json.dumps({"id": evil("tagdataid"), "prompt": evil("tagdataprompt")}) + "\n")
    (folder / "config.yaml").write_text(
        f"plugins: []\nmodel: {{path: checkpoints/step_000001/model}}\ndata: {{train: {json.dumps(data)}}}\n"
        f"rollout: {{n: 2}}\ntrainer: {{steps: 3, project: {json.dumps(evil('tagconfig'))}}}\n"
    )
    metrics = {
        "step": 1,
        "reward_mean": 0.5,
        "reward_std": 0.5,
        "tool_use": 1.0,
        f"reward/{evil('tagmetrickey')}": 0.5,
        f"stop/max_{evil('tagstopkey')}": 2,  # every trajectory truncated: the banner names the reason
        evil("tagmetricname"): evil("tagmetricvalue"),
    }
    (folder / "metrics.jsonl").write_text(json.dumps(metrics) + "\n")
    (folder / "samples").mkdir()
    (folder / "samples" / "step_000001.jsonl").write_text("".join(json.dumps(record(k, ids)) + "\n" for k in (0, 1)))
    (folder / "ui.log").write_text(f"step 1\n{evil('taglog')}\nstep 2\n")
    (folder / "summary.json").write_text(json.dumps({"status": "finished", "steps": 1, "total_s": 4.0}))


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The runs folder: both payload-named runs, sharing one tokenizer trained on the payloads."""
    from rlfcore.tinymodel import build_tokenizer

    base = tmp_path_factory.mktemp("escaping")
    tok = build_tokenizer([f"{evil('tagprompt')} {evil('tagresponse')}"] * 20, base / "tokenizer", vocab_size=300)
    ids = {
        "prompt_ids": tok.encode(evil("tagprompt")),
        "response_ids": tok.encode(evil("tagresponse")),
    }
    ids["response_mask"] = [1] * len(ids["response_ids"])
    for name in RUNS:
        write_run(base / "runs" / name, base / "tokenizer", ids)
    return base / "runs"


@pytest.fixture(scope="module")
def client(runs: Path) -> Iterator[TestClient]:
    with TestClient(create_app(runs, token=TOKEN), base_url=BASE, headers={"X-RLF-Token": TOKEN}) as c:
        yield c


class Injected(HTMLParser):
    """What a page would run or load in a browser beyond the UI's own: tags and handlers the payloads
    make (an ``img``, a ``script`` without ``src``, an ``on...`` attribute), and script text naming them."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[str] = []
        self._inline = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        names = [a for a, _ in attrs]
        if tag == "img":
            self.found.append(f"<img {attrs}>")
        self._inline = tag == "script" and "src" not in names
        self.found += [f"<{tag} {a}=...>" for a in names if a.startswith("on")]

    def handle_endtag(self, tag: str) -> None:
        self._inline = False

    def handle_data(self, data: str) -> None:
        if self._inline and "alert(" in data:
            self.found.append(f"script text {data[:80]!r}")


def assert_inert(page: str, where: str, *tags: str) -> None:
    """``page`` holds neither payload as markup, and shows each field ``tags`` names."""
    assert SCRIPT not in page and "<img src=x" not in page, where
    parser = Injected()
    parser.feed(page)
    assert not parser.found, (where, parser.found)
    for tag in tags:
        assert tag in page, f"{where}: the field {tag} is not on the page"


def get(client: TestClient, path: str, **params: Any) -> str:
    response = client.get(path, params=params)
    assert response.headers["content-type"].startswith("text/html"), (path, response.headers["content-type"])
    return response.text


SAMPLE_TAGS = (
    "tagid",
    "tagsystem",
    "tagprompt",
    "tagcallturn",
    "tagreasoning",
    "tagtoolname",
    "tagargkey",
    "tagargs",
    "tagresult",
    "tagtoolerror",
    "tagresponse",
    "tagerrorkind",
    "tagstop",
    "tagerror",
    "tagmismatch",
    "tagtruth",
    "tagextrakey",
    "tagextra",
    "tagcomponent",
    "tagrewarderror",
    "taganswer",
    "tagenv",
)


def test_the_runs_list_and_compare_page_show_payload_run_names_as_text(client: TestClient) -> None:
    for path in ("/", "/runs-table"):
        page = get(client, path)
        assert_inert(page, path)
        for name in RUNS:
            assert str(escape(name)) in page, (path, name)
    page = get(client, "/compare", run=list(RUNS))
    assert_inert(page, "/compare")
    assert all(str(escape(name)) in page for name in RUNS)


@pytest.mark.parametrize("run", RUNS, ids=["img", "script"])
def test_a_runs_pages_show_every_stored_field_as_text(client: TestClient, run: str) -> None:
    assert_inert(page := get(client, "/run", run=run), "/run", str(escape(run)))
    assert 'data-run="' + str(escape(run)) + '"' in page  # the charts' own run, quoted as text
    assert_inert(get(client, "/banner", run=run), "/banner", "tagstopkey")
    assert_inert(get(client, "/log", run=run), "/log", "taglog")
    trajectories = get(client, "/trajectories", run=run)
    assert_inert(trajectories, "/trajectories", "tagid", "tagrow", "tagcomponent", "tagstop", "tagenv")
    assert_inert(get(client, "/sample", run=run, i=0), "/sample", *SAMPLE_TAGS)
    assert_inert(get(client, "/sample", run=run, i=0, j=1), "/sample side by side", *SAMPLE_TAGS)
    tokens = get(client, "/tokens", run=run, i=0)
    assert_inert(tokens, "/tokens", "tagid", "tagmismatch")
    assert "&lt;" in tokens.split('<div class="tokens">', 1)[1]  # decoded tokens hold the payloads' brackets


@pytest.mark.parametrize("run", RUNS, ids=["img", "script"])
def test_the_data_page_and_validation_show_config_values_and_rows_as_text(
    client: TestClient, runs: Path, run: str
) -> None:
    config = runs / run / "config.yaml"
    page = get(client, "/data", config=str(config))
    assert "tagdataprompt" in page, page  # the preview ran: its rows are on the page
    assert_inert(page, "/data", "tagconfig", "tagdataid", "tagdataprompt", str(escape(IMG)) + ".jsonl")
    text = config.read_text()
    for form, tags in (
        ({"text": text, "config": str(config)}, ("tagconfig",)),  # valid: the resolved config is shown
        ({"text": text + f"{json.dumps(evil('tagunknown'))}: 1\n", "config": str(config)}, ("tagunknown",)),
    ):
        response = client.post("/config/validate", data=form)
        assert_inert(response.text, "/config/validate", *tags)


@pytest.mark.parametrize("run", RUNS, ids=["img", "script"])
def test_pages_that_echo_the_request_escape_it(client: TestClient, run: str) -> None:
    """Query values come back in forms and error messages: a link to the UI cannot inject them either."""
    echoed = {"q": evil("tagq"), "stop": evil("tagstopq"), "env": evil("tagenvq")}
    assert_inert(get(client, "/trajectories", run=run, **echoed), "/trajectories filtered", "tagq")
    for path, params, tag in (
        ("/trajectories", {"run": run, "min_reward": evil("tagbound")}, "tagbound"),
        ("/trajectories", {"run": run, "file": evil("tagfile")}, "tagfile"),
        ("/sample", {"run": run, "i": evil("tagindex")}, "tagindex"),
        ("/run", {"run": run + evil("tagmissing")}, "tagmissing"),
        ("/data", {"overrides": f"{evil('tagoverride')}=1"}, "tagoverride"),
    ):
        response = client.get(path, params=params)
        assert response.status_code in (400, 403, 404), (path, response.status_code)
        assert_inert(response.text, f"{path} {params}", tag)
