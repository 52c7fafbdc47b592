"""``rlf ui`` under big or changing files: an enormous log line, a step file rewritten by a resume, records
with missing or odd fields, and records too big for a page."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette")
from starlette.testclient import TestClient

from rlfcore.rundata.files import tail_lines
from rlfcore.ui import create_app
from rlfcore.ui.samples import SampleIndex

TOKEN = "files-test-token-0123456789"


def record(i: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": i,
        "row_id": i.split("#", maxsplit=1)[0],
        "reward": 1.0,
        "stop_reason": "answer",
        "ground_truth": "5",
        "messages": [{"role": "user", "content": "2+3?"}, {"role": "assistant", "content": "5"}],
        "prompt_ids": [1, 2, 3],
        "response_ids": [4, 5],
        "response_mask": [1, 1],
        **extra,
    }


def write_step(run: Path, records: list[dict[str, Any]], step: int = 1) -> Path:
    path = run / "samples" / f"step_{step:06d}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:  # in place, as a resumed run rewrites its step
        f.writelines(json.dumps(r) + "\n" for r in records)
    return path


@pytest.fixture()
def run(tmp_path: Path) -> Path:
    folder = tmp_path / "runs" / "r"
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward_mean": 1.0}) + "\n")
    return folder


@pytest.fixture()
def client(run: Path) -> Any:
    app = create_app(run.parent, token=TOKEN)
    with TestClient(app, base_url="http://127.0.0.1", headers={"X-RLF-Token": TOKEN}) as c:
        yield c


class Counting(io.BufferedReader):
    """A file that counts the bytes read from it."""

    read_bytes = 0

    def read(self, size: int | None = -1) -> bytes:
        data = super().read(size)
        Counting.read_bytes += len(data)
        return data


def test_log_tail_of_a_32_mb_progress_line_reads_a_bounded_slice(tmp_path: Path, monkeypatch: Any) -> None:
    """Before: the tail re-joined its blocks on every step (superlinear) until it found a line end, and
    returned the whole 32 MB line; every page froze for 12 s."""
    log = tmp_path / "train.log"
    with log.open("wb") as f:
        f.write(b"started\n" + b"\r step 1/100 " * (32_000_000 // 13) + b"\n" + b"step 2 done\n")
    opened = Path.open
    monkeypatch.setattr(
        Path,
        "open",
        lambda self, mode="r", *a, **k: (
            Counting(io.FileIO(self, "rb")) if mode == "rb" else opened(self, mode, *a, **k)
        ),
    )
    Counting.read_bytes = 0
    lines = tail_lines(log, 60)
    assert Counting.read_bytes <= (1 << 20) + (64 << 10)
    assert lines[-1] == "step 2 done"
    assert all(len(line) < 4100 for line in lines), [len(x) for x in lines]


def test_log_tail_cuts_long_lines_and_keeps_short_ones(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("a\n" + "x" * 10_000 + "\nb\n")
    lines = tail_lines(log, 60)
    assert lines[0] == "a" and lines[-1] == "b" and "more characters" in lines[1] and len(lines[1]) < 4100


def test_the_log_route_serves_an_enormous_line_cut(client: TestClient, run: Path) -> None:
    (run / "ui.log").write_bytes(b"x" * 5_000_000 + b"\nlast line\n")
    page = client.get("/log?run=r")
    assert page.status_code == 200 and "last line" in page.text and len(page.text) < 100_000


def test_a_step_file_rewritten_larger_is_indexed_anew(client: TestClient, run: Path) -> None:
    """Before: the index kept the old file's ids and offsets; the sample page answered 500."""
    path = write_step(run, [record("old-a#0"), record("old-b#0")])
    index = SampleIndex(path).refresh()
    assert [e.id for e in index.entries] == ["old-a#0", "old-b#0"]
    assert "old-a" in client.get("/trajectories?run=r").text
    write_step(run, [record(f"new-{k}#0", note="x" * 300) for k in range(3)])  # a resumed run, longer
    assert [e.id for e in index.refresh().entries] == ["new-0#0", "new-1#0", "new-2#0"]
    page = client.get("/trajectories?run=r").text
    assert "new-2" in page and "old-a" not in page
    sample = client.get("/sample?run=r&i=2")
    assert sample.status_code == 200 and "new-2#0" in sample.text


def test_records_with_missing_or_odd_fields_render(client: TestClient, run: Path) -> None:
    """Before: no ground_truth, or a template_mismatch that is not a string, answered 500."""
    bare = record("bare#0")
    del bare["ground_truth"]
    odd = record("odd#0", template_mismatch={"token": 3, "why": "differs"})
    write_step(run, [bare, odd, record("list#0", messages="not a list", reward_components=[1, 2])])
    for i in range(3):
        for route in ("sample", "tokens"):
            page = client.get(f"/{route}?run=r&i={i}")
            assert page.status_code == 200, (route, i, page.text[-500:])
    assert "differs" in client.get("/sample?run=r&i=1").text


def test_a_long_field_is_cut_with_a_link_to_the_raw_line(client: TestClient, run: Path) -> None:
    huge = "y" * 3_000_000
    write_step(run, [record("long#0", messages=[{"role": "user", "content": huge}])])
    page = client.get("/sample?run=r&i=0")
    assert page.status_code == 200 and len(page.text) < 200_000
    assert "more characters" in page.text and "/raw?run=r" in page.text
    raw = client.get("/raw?run=r&file=step_000001.jsonl&i=0")
    assert raw.status_code == 200 and json.loads(raw.content)["messages"][0]["content"] == huge


def test_a_record_too_big_to_parse_is_not_loaded(client: TestClient, run: Path, monkeypatch: Any) -> None:
    """Before: a 300 MB line made a 314 MB page. (The cap is lowered here so the file stays small.)"""
    import rlfcore.ui.views.trajectories as trajectories_view

    monkeypatch.setattr(trajectories_view, "LINE_BYTES", 1 << 20)
    write_step(run, [record("big#0", blob="z" * (2 << 20)), record("small#0")])
    page = client.get("/sample?run=r&i=0")
    assert page.status_code == 200 and "too big to show here" in page.text and len(page.text) < 50_000
    assert client.get("/sample?run=r&i=1").status_code == 200


def test_an_unexpected_failure_is_a_readable_page(client: TestClient, run: Path, monkeypatch: Any) -> None:
    import rlfcore.ui.views.trajectories as trajectories_view

    write_step(run, [record("a#0")])

    def broken(*_args: Any) -> Any:
        raise RuntimeError("disk went away")

    monkeypatch.setattr(trajectories_view, "_record", broken)
    with TestClient(client.app, base_url="http://127.0.0.1", raise_server_exceptions=False) as c:
        page = c.get("/sample?run=r&i=0", headers={"X-RLF-Token": TOKEN})
    assert page.status_code == 500 and "this page failed: RuntimeError: disk went away" in page.text
