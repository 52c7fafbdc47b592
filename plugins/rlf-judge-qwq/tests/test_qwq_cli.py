"""``rlf eval`` and ``rlf train`` with ``plugins: [judge-qwq]`` against a judge endpoint on loopback.

The judge is rlfcore.testing's stand-in chat server (vLLM cannot run here); it grades every
response 7 of 10, so the judge component of every sample is 0.7. The policy is a tiny local model
built in the test: the point is that the judge's verdicts reach the rewards and the update.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from rlfcore.testing import OpenAIServer


def _rlf(*args: str, cwd) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLF_")}
    return subprocess.run(
        [sys.executable, "-m", "rlfcore", *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=600
    )


def test_eval_and_train_with_the_judge(tmp_path):
    rows = [{"id": f"q{i}", "prompt": f"Name a colour number {i}."} for i in range(4)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with OpenAIServer("<think>\nFine.\n</think>\n\nVERDICT: 7") as judge:
        (tmp_path / "run.yaml").write_text(
            "plugins: [judge-qwq]\n"
            f"judge-qwq: {{endpoints: ['{judge.base_url}'], max_tokens: 64}}\n"
            "reward: {weights: {judge: 1.0}}\n"
            "model:\n  path: model\n  init: {texts: [rows.jsonl], vocab_size: 300, hidden_size: 32, num_layers: 1, "
            "num_heads: 2, num_kv_heads: 1, intermediate_size: 64}\n"
            "data: {train: rows.jsonl, eval: rows.jsonl}\n"
            "rollout: {n: 2, max_turns: 1, sampling: {max_tokens: 8}}\n"
            "trainer: {steps: 2, prompts_per_step: 2}\n"
            "engine: {device: cpu}\n"
        )
        model = _rlf("init-model", "run.yaml", cwd=tmp_path)
        assert model.returncode == 0, model.stderr
        evaluated = _rlf("eval", "run.yaml", "--out", "eval.jsonl", cwd=tmp_path)
        assert evaluated.returncode == 0, evaluated.stdout + evaluated.stderr
        trained = _rlf("train", "run.yaml", "--run-dir", "run", cwd=tmp_path)
        assert trained.returncode == 0, trained.stdout + trained.stderr
        assert len(judge.requests) >= 8 + 8  # 4 rows x 2 samples in eval, 2 steps x 2 rows x 2 samples in training
    records = [json.loads(x) for x in (tmp_path / "eval.jsonl").read_text().splitlines()]
    assert len(records) == 8
    assert all(r["reward_components"]["judge.judge-qwq"] == 0.7 and r["reward"] == 0.7 for r in records)
    metrics = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2]
    assert all(m["reward/judge.judge-qwq"] == 0.7 and m["reward_mean"] == 0.7 for m in metrics)
