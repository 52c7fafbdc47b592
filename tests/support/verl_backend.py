"""Shared pieces of the verl backend tests (no tests here): a tiny model, a tool plugin, a scripted LLM server client."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from tests.support.samples import ADDER_PLUGIN

CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
TEXTS = ["What is 2 plus 3? The answer is 5.", CALL] * 20
LOGPROB = -0.25


def write_run(tmp: Path, model: Path, rows: int = 4, extra: str = "") -> Path:
    """A run folder: the adder plugin, ``rows`` questions and a config using the tiny model."""
    (tmp / "adder.py").write_text(ADDER_PLUGIN)
    data = [{"id": f"q{i}", "prompt": f"What is {i} plus 1?", "ground_truth": str(i + 1)} for i in range(rows)]
    (tmp / "data.jsonl").write_text("\n".join(json.dumps(r) for r in data) + "\n")
    (tmp / "run.yaml").write_text(
        f"local_plugins: [adder.py]\nmodel:\n  path: {model}\ndata:\n  train: data.jsonl\n"
        "rollout:\n  n: 2\n  max_turns: 3\n  max_total_tokens: 768\n  max_response_tokens: 256\n"
        "  sampling:\n    max_tokens: 64\n"
        f"trainer:\n  steps: 2\n  prompts_per_step: 2\n  micro_batch_size: 2\n{extra}"
    )
    return tmp / "run.yaml"


class ScriptedServerClient:
    """Stands in for verl's ``LLMServerClient``: plays a tool call, then the row's answer.

    The answer is read from the prompt ("What is N plus 1?"), so every sample gets its own reward.
    """

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self.turns: dict[str, int] = defaultdict(int)
        self.requests: list[dict[str, Any]] = []

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **kwargs: Any):
        from verl.workers.rollout.replica import TokenOutput

        self.requests.append(
            {"request_id": request_id, "sampling_params": dict(sampling_params), "prompt_ids": prompt_ids}
        )
        turn = self.turns[request_id]
        self.turns[request_id] += 1
        if turn == 0:
            text = CALL
        else:
            prompt = self.tokenizer.decode(prompt_ids)
            n = int(prompt.split("What is ")[1].split(" ")[0])
            text = str(n + 1) if n % 2 == 0 else "no idea"  # odd rows answer wrongly: reward 0
        ids = self.tokenizer.encode(text + "<|im_end|>", add_special_tokens=False)
        return TokenOutput(token_ids=ids, log_probs=[LOGPROB] * len(ids), stop_reason="completed")


class _Remote:
    """``handle.method.remote(...)`` for an in-process callable, as verl calls its Ray actors."""

    def __init__(self, fn: Any):
        self.fn = fn

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


class ScriptedVllmServer:
    """Stands in for verl's vLLM server actor (``vLLMHttpServer.generate``) behind verl's real
    ``LLMServerClient``: a tool call first, then the row's answer (odd rows answer wrongly).

    Like the real server it stamps ``extra_fields["global_steps"]``, the weight version it sampled
    with; ``versions`` gives that version per turn, so a test can play a weight update between turns.
    """

    def __init__(self, tokenizer: Any, versions: tuple[int, int] = (3, 4)):
        self.tokenizer = tokenizer
        self.versions = versions
        self.generate = _Remote(self._generate)

    async def _generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **kwargs: Any
    ):
        from verl.workers.rollout.replica import TokenOutput

        prompt = self.tokenizer.decode(prompt_ids)
        turn = 1 if "<tool_response>" in prompt else 0
        if turn == 0:
            text = CALL
        else:
            n = int(prompt.split("What is ")[1].split(" ")[0])
            text = str(n + 1) if n % 2 == 0 else "no idea"
        ids = self.tokenizer.encode(text + "<|im_end|>", add_special_tokens=False)
        return TokenOutput(
            token_ids=ids,
            log_probs=[LOGPROB] * len(ids),
            stop_reason="completed",
            extra_fields={"global_steps": self.versions[turn]},
        )


class InProcessLoadBalancer:
    """verl's global load balancer actor reduced to one in-process server (no Ray)."""

    def __init__(self, server: Any):
        async def fields() -> list[str]:
            return []

        async def acquire(request_id: str, **_: Any) -> tuple[str, Any]:  # noqa: ARG001 - verl passes it by name
            return "server-0", server

        self.require_acquire_fields = _Remote(fields)
        self.require_release_fields = _Remote(fields)
        self.acquire_server = _Remote(acquire)
        self.release_server = _Remote(lambda **_: None)
