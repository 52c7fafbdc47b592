"""``rlf eval`` with ``plugins: [nl2sql]`` on GeoQuery, from the example config, with the ``openai`` engine.

The served model is a stand-in: rlfcore.testing's loopback OpenAI-compatible server, whose completions play a fixed
policy (explore with the ``sql`` tool, then answer) and speaks in token ids of a tokenizer built here,
as vLLM does. So the run goes through the real command, engine, loop, tool, verification and reward,
and the rewards it reports can be checked exactly.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlf_nl2sql.prepare import prepare, read_records, write_jsonl

from rlfcore.testing import OpenAIServer, Reply, Responder

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "geoquery.yaml"
EXPLORE = '<tool_call>\n{"name": "sql", "arguments": {"query": "SELECT COUNT(*) FROM city"}}\n</tool_call>'


def policy_model(tokenizer: Any, policy: Callable[[str], str]) -> Responder:
    """Completions that decode the prompt ids, ask ``policy`` for the text and answer its ids."""
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")

    def respond(body: dict[str, Any]) -> Reply:
        text = policy(tokenizer.decode(body["prompt"]))
        return Reply(text, token_ids=tokenizer.encode(text, add_special_tokens=False) + [eos], ids_in="token_ids")

    return respond


def test_rlf_eval_runs_the_example_config_on_geoquery(shared_data, tmp_path):
    from rlfcore.testing import build_tokenizer

    geoquery = shared_data / "nl2sql" / "geoquery"
    rows = prepare(read_records(geoquery / "geoquery.jsonl"), geoquery, where={"question_split": "test"}, limit=3).rows
    write_jsonl(rows, tmp_path / "rows.jsonl")
    answers = {r["extra"]["question"]: r["ground_truth"] for r in rows[:2]}  # the third is answered wrongly
    tokenizer = build_tokenizer([r["prompt"] for r in rows] + [EXPLORE], tmp_path / "tokenizer", vocab_size=400)

    def policy(prompt: str) -> str:
        question = re.findall(r"Question: (.*)", prompt)[-1]
        if "<tool_response>" not in prompt:
            return "Let me look at the data.\n" + EXPLORE
        return f"```sql\n{answers.get(question, 'SELECT 1')}\n```"

    env = {k: v for k, v in os.environ.items() if not k.startswith("RLF_")}
    with OpenAIServer(completions=policy_model(tokenizer, policy)) as server:
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "rlfcore",
                "eval",
                str(EXAMPLE),
                "--engine",
                "openai",
                f"engine.base_url={server.base_url}",
                f"model.tokenizer={tmp_path / 'tokenizer'}",
                f"data.eval={tmp_path / 'rows.jsonl'}",
                f"nl2sql.db_root={geoquery}",
                "--out",
                str(tmp_path / "out.jsonl"),
            ],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=env,
            timeout=300,
        )
    assert out.returncode == 0, out.stdout + out.stderr
    records = {r["row_id"]: r for r in map(json.loads, (tmp_path / "out.jsonl").read_text().splitlines())}
    assert list(records) == [r["id"] for r in rows] or sorted(records) == sorted(r["id"] for r in rows)
    for r in records.values():
        assert r["env"] == "nl2sql" and r["stop_reason"] == "answer" and r["reward_error"] is None, r["error"]
        assert 'CREATE TABLE "city"' in r["messages"][0]["content"]
        assert r["tool_calls"] == 1 and r["tool_errors"] == 0
        assert r["messages"][2] == {
            "role": "tool",
            "tool_call_id": "call_0",
            "name": "sql",
            "content": "COUNT(*)\n386\n(1 row)",
        }
    # the example config gives 0.1 of the reward for the ```sql format, 0.9 for execution match
    rewards = [round(records[r["id"]]["reward"], 6) for r in rows]
    assert rewards == [1.0, 1.0, 0.1]
    assert "reward" in out.stdout and "0.7000" in out.stdout


def test_rlf_train_runs_the_example_config_on_geoquery(shared_data, tmp_path):
    """Two GRPO steps on GeoQuery with a tiny model built from the rows' text: the loop runs the sql
    tool against the real database and the execution reward feeds the update."""
    geoquery = shared_data / "nl2sql" / "geoquery"
    rows = prepare(read_records(geoquery / "geoquery.jsonl"), geoquery, where={"question_split": "train"}, limit=4).rows
    write_jsonl(rows, tmp_path / "rows.jsonl")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLF_")}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "rlfcore",
            "train",
            str(EXAMPLE),
            "--run-dir",
            str(tmp_path / "run"),
            f"data.train={tmp_path / 'rows.jsonl'}",
            f"nl2sql.db_root={geoquery}",
            f"model.path={tmp_path / 'model'}",
            f"model.init.texts=[{tmp_path / 'rows.jsonl'}]",
            "model.init.vocab_size=400",
            "model.init.hidden_size=32",
            "model.init.num_layers=1",
            "model.init.intermediate_size=64",
            "model.init.template=qwen3",
            "trainer.steps=2",
            "trainer.prompts_per_step=2",
            "rollout.n=2",
            "rollout.max_turns=2",
            "rollout.sampling.temperature=1.0",
            "rollout.sampling.max_tokens=16",
            "engine.device=cpu",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    metrics = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2] and all("reward_mean" in m for m in metrics)
    sample = json.loads((tmp_path / "run" / "samples" / "step_000001.jsonl").read_text().splitlines()[0])
    assert sample["env"] == "nl2sql" and sample["reward_error"] is None
