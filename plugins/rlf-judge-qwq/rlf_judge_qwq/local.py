"""The judge as an in-process transformers model, for CPU runs and tests (``backend: transformers``).

The model loads on first use (torch and transformers are imported then, never at plugin import) and
decodes greedily; one generation runs at a time, in a worker thread so the event loop stays free.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlf_judge_qwq.endpoints import Completion
from rlf_judge_qwq.metrics import JudgeMetrics

GenerateFn = Callable[[list[dict[str, Any]], int], Completion]
"""``(messages, max_tokens) -> Completion``: one greedy generation."""


class TransformersJudge:
    """Generates the judge's answer with a causal LM from ``model_path`` (or with ``generate_fn``)."""

    def __init__(
        self, model_path: str | Path, metrics: JudgeMetrics, device: str = "cpu", generate_fn: GenerateFn | None = None
    ):
        self.model_path = Path(model_path)
        self.device = device
        self.metrics = metrics
        self.generate_fn = generate_fn or self._generate
        self._lock = threading.Lock()
        self._model: Any = None
        self._tokenizer: Any = None

    async def complete(self, messages: list[dict[str, Any]], params: dict[str, Any]) -> Completion:
        start = time.perf_counter()
        try:
            completion = await asyncio.to_thread(self._locked, messages, int(params["max_tokens"]))
        except Exception:
            self.metrics.record_request("local", time.perf_counter() - start, "generate")
            raise
        self.metrics.record_request("local", time.perf_counter() - start)
        return completion

    async def aclose(self) -> None:
        """Nothing to close: the model stays loaded for the next call."""

    def _locked(self, messages: list[dict[str, Any]], max_tokens: int) -> Completion:
        with self._lock:
            return self.generate_fn(messages, max_tokens)

    def _load(self) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if not self.model_path.is_dir():
            raise FileNotFoundError(f"judge-qwq: model_path {self.model_path} is not a folder")
        self._tokenizer = AutoTokenizer.from_pretrained(str(self.model_path))
        # typed as a torch module: transformers' own .to, wrapped by functools.wraps, reads as unbound to mypy
        model: torch.nn.Module = AutoModelForCausalLM.from_pretrained(str(self.model_path))
        self._model = model.to(self.device).eval()

    def _generate(self, messages: list[dict[str, Any]], max_tokens: int) -> Completion:
        import torch

        if self._model is None:
            self._load()
        tok, model = self._tokenizer, self._model
        inputs = tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
        inputs = {k: v.to(self.device) for k, v in inputs.items()}
        with torch.no_grad():
            out = model.generate(**inputs, max_new_tokens=max_tokens, do_sample=False, pad_token_id=tok.pad_token_id)
        new = out[0, inputs["input_ids"].shape[1] :].tolist()
        ends = (tok.eos_token_id, tok.pad_token_id, *_list(model.generation_config.eos_token_id))
        stops = {t for t in ends if t is not None}
        ended = next((i for i, t in enumerate(new) if t in stops), None)
        text = tok.decode(new if ended is None else new[:ended], skip_special_tokens=False)
        return Completion(text, "stop" if ended is not None else "length")


def _list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value]
