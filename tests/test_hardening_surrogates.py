"""Lone surrogates (``"\\ud800"``: valid JSON, not Unicode) from a model's call, a tool's output or a
stored trajectory: the run goes on, every trajectory is written, escaped, and reads back the same."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlfcore.surrogates import json_line, replaced
from tests.support.rlf import run_rlf

SURROGATE_PLUGIN = r'''
import os

from rlfcore import hookimpl
from rlfcore.engines.scripted import ScriptedEngine
from rlfcore.tools import tool


@tool
def listing(folder: str) -> str:
    """List a folder; names that are not UTF-8 come back surrogate-escaped, as os.listdir gives them."""
    return "report.txt " + os.fsdecode(b"caf\xe9.txt")


@tool
def echo(text: str) -> str:
    """Say the text back."""
    return text


SCRIPT = {
    "bad_args": ['<tool_call>{"name": "echo", "arguments": {"text": "a\\ud800b"}}</tool_call>', "The answer is 1."],
    "bad_output": ['<tool_call>{"name": "listing", "arguments": {"folder": "."}}</tool_call>', "The answer is 2."],
    "plain": ['<tool_call>{"name": "echo", "arguments": {"text": "3"}}</tool_call>', "The answer is 3."],
}


@hookimpl
def register_tools(ctx):
    return [listing, echo]


@hookimpl
def register_engines(ctx):
    return {"script": lambda config, tokenizer: ScriptedEngine(tokenizer, SCRIPT)}
'''


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from rlfcore.tinymodel import build_tiny

    texts = ['<tool_call>{"name": "echo", "arguments": {"text": "x"}}</tool_call> The answer is 1.'] * 10
    return build_tiny(texts, tmp_path_factory.mktemp("tiny") / "model", vocab_size=300)


@pytest.mark.slow
def test_rlf_eval_writes_every_trajectory_when_calls_and_outputs_hold_lone_surrogates(tiny, tmp_path):
    (tmp_path / "surrogates.py").write_text(SURROGATE_PLUGIN)
    rows = [{"id": i, "prompt": f"Question {i}?", "ground_truth": "1"} for i in ("bad_args", "bad_output", "plain")]
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "run.yaml").write_text(
        f"local_plugins: [surrogates.py]\nmodel:\n  path: {tiny}\ndata:\n  eval: data.jsonl\nengine:\n  name: script\n"
        "rollout:\n  n: 2\n  max_turns: 3\n"
    )
    out = run_rlf("eval", str(tmp_path / "run.yaml"), "--out", str(tmp_path / "out.jsonl"), cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = [json.loads(x) for x in (tmp_path / "out.jsonl").read_bytes().decode("utf-8").splitlines()]
    by_row = {x["row_id"]: x for x in lines}
    assert len(lines) == 6 and set(by_row) == {"bad_args", "bad_output", "plain"}
    assert all(x["stop_reason"] == "answer" for x in lines), [
        (x["row_id"], x["stop_reason"], x["error"]) for x in lines
    ]
    bad_call = by_row["bad_args"]["messages"][-2]
    assert bad_call["role"] == "tool" and "lone surrogate (U+D800)" in bad_call["content"]
    listing = by_row["bad_output"]["messages"][-2]["content"]
    assert listing == "report.txt caf\ufffd.txt"  # what the model read: valid text, the byte marked as unreadable
    assert by_row["plain"]["messages"][-2]["content"] == "3" and by_row["plain"]["tool_errors"] == 0


def test_json_lines_escape_lone_surrogates_and_read_back_the_same():
    record = {"text": "a\ud800b", "k\udcff": ["caf\u00e9", "\U0001f600"]}
    line = json_line(record)
    assert line.endswith("\n") and line.count("\n") == 1
    assert (
        "\\ud800" in line and "\\udcff" in line and "caf\u00e9" in line and "\U0001f600" in line
    )  # the rest stays readable
    assert json.loads(line.encode("utf-8")) == record


def test_tool_text_is_made_valid_unicode():
    assert replaced("a\ud800b\udcffc") == "a\ufffdb\ufffdc"
    assert replaced("caf\u00e9 \U0001f600") == "caf\u00e9 \U0001f600"


def test_run_folder_samples_and_rescored_files_hold_lone_surrogates(tmp_path):
    from rlfcore.backends.local.rundir import RunDir
    from rlfcore.loop import Trajectory
    from rlfcore.rescoring import read_trajectories

    trajectory = Trajectory(id="t#0", row_id="t", env="e", messages=[{"role": "tool", "content": "x\udcffy"}])
    RunDir(tmp_path / "run").samples(1, [trajectory.record()])
    [back] = read_trajectories(tmp_path / "run" / "samples" / "step_000001.jsonl")
    assert back.messages == trajectory.messages
