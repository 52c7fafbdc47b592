"""A rollout engine on a torch causal LM in this process: the local backend's policy, on CPU or one GPU.

Concurrent ``generate`` calls (one per trajectory turn) are gathered into batches, because one
forward pass over 32 rows costs about as much as one over a single row. The engine samples from the
model object it was given, never a copy, so a trainer that updates ``engine.model`` in place is
generating from its newest weights at the next batch.
"""

from __future__ import annotations

import asyncio
import inspect
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from rlfcore.engines.base import Engine, Generation, SamplingParams

_CLOSED = "TransformersEngine was closed before this request ran"


@dataclass
class EngineStats:
    """Counters a benchmark or a test reads: batches run, requests served, forward passes, tokens made."""

    batches: int = 0
    requests: int = 0
    forward_passes: int = 0
    generated_tokens: int = 0


@dataclass
class _Request:
    prompt_ids: list[int]
    params: SamplingParams
    future: asyncio.Future[Generation]
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    generator: torch.Generator | None = None


_DTYPES = {"auto": torch.float32, "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_dtype(dtype: str) -> torch.dtype:
    """The torch dtype of ``model.dtype``, one rule for the engine and for training.

    ``auto`` is float32 whatever the checkpoint holds: training needs full-precision weights, and an
    engine that evaluates a checkpoint then samples with the numerics of the policy that trains from it.
    """
    try:
        return _DTYPES[dtype]
    except KeyError:
        raise ValueError(f"model.dtype: {dtype!r} is not one of {', '.join(_DTYPES)}") from None


def resolve_device(device: str | torch.device) -> torch.device:
    """``auto`` is the first GPU when there is one, else the CPU."""
    if str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


class TransformersEngine(Engine):
    """Batched sampling from a Hugging Face causal LM with a KV cache.

    Batching: a request waits ``batch_wait_s`` (a few ms) for others, then up to ``max_batch_size``
    waiting requests are left-padded into one batch; requests that arrive while a batch runs form the
    next one. Rows of a batch may have different sampling params, stop tokens and ``max_tokens``.
    A row that finishes is dropped from the batch (its KV cache rows are removed) and its caller is
    answered at once, so its tool calls can start while the other rows are still generating.

    The forward passes run in a worker thread, so the event loop keeps serving tool calls meanwhile.
    During a batch the model is in eval mode under ``torch.no_grad()``; each module's training flag is
    restored afterwards. (``no_grad``, not ``inference_mode``: buffers a forward pass may rewrite, such
    as dynamic RoPE frequencies, must stay usable by the trainer's autograd.)

    Logprobs are those of the model's distribution at the request's temperature,
    ``log_softmax(logits / T)``, *before* top-k/top-p filtering, as the trainer computes them (vLLM
    reports temperature-1 logprobs unless served with ``--logprobs-mode processed_logprobs``); with
    ``T = 0`` (greedy) they are ``log_softmax(logits)``. A ``seed`` gives the request its own
    ``torch.Generator``, so its samples do not depend on what else shares the batch; requests without
    one draw from torch's global generator.

    Stop strings (``params.stop``) need ``tokenizer`` (anything with ``decode(ids) -> str``): after each
    token the tail of the row's text is decoded, and a row whose text now holds a stop string ends
    there with ``finish_reason="stop"``.
    """

    def __init__(
        self,
        model: Any,
        max_batch_size: int = 32,
        device: str | torch.device | None = None,
        batch_wait_s: float = 0.005,
        pad_token_id: int | None = None,
        threads: int | None = None,
        tokenizer: Any = None,
    ):
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be at least 1, got {max_batch_size}")
        self.model = model
        if device is not None:
            self.device = resolve_device(device)
            model.to(self.device)  # in place: parameters stay the same objects the trainer holds
        else:
            self.device = next(model.parameters()).device
        self.max_batch_size = max_batch_size
        self.batch_wait_s = batch_wait_s
        self.tokenizer = tokenizer
        self.threads = threads
        """torch's intra-op threads while a batch decodes (``None``: leave them as they are)."""
        config_pad = getattr(model.config, "pad_token_id", None)
        self.pad_token_id = pad_token_id if pad_token_id is not None else (config_pad if config_pad is not None else 0)
        self.stats = EngineStats()
        self._logits_to_keep = "logits_to_keep" in inspect.signature(model.forward).parameters
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue[_Request] | None = None
        self._worker: asyncio.Task[None] | None = None

    @classmethod
    def from_pretrained(
        cls,
        path: str,
        device: str = "auto",
        dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto",
        max_batch_size: int = 32,
        threads: int | None = None,
        tokenizer: Any = None,
    ) -> TransformersEngine:
        """Load a model folder onto ``device`` (``auto``: a GPU when there is one) in ``dtype`` (:func:`resolve_dtype`)."""
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(path, dtype=resolve_dtype(dtype))
        return cls(model, max_batch_size=max_batch_size, device=device, threads=threads, tokenizer=tokenizer)

    async def generate(self, prompt_ids: list[int], params: SamplingParams, request_id: str = "") -> Generation:
        if not prompt_ids:
            raise ValueError(f"request {request_id!r}: the prompt is empty; the engine needs at least one token")
        if params.max_tokens < 1:
            raise ValueError(f"request {request_id!r}: max_tokens must be at least 1, got {params.max_tokens}")
        if params.stop and self.tokenizer is None:
            raise ValueError(
                f"request {request_id!r}: stop strings {params.stop} need the engine's tokenizer, which is unset"
            )
        loop = asyncio.get_running_loop()
        request = _Request(list(prompt_ids), params, loop.create_future())
        self._queue_for(loop).put_nowait(request)
        return await request.future

    async def close(self) -> None:
        """Stop batching; requests still waiting fail. A batch already running finishes in its thread."""
        if self._worker is not None:
            self._worker.cancel()  # fails the requests it gathered but had not started
        if self._queue is not None:
            while not self._queue.empty():
                _fail(self._queue.get_nowait(), RuntimeError(_CLOSED))
        self._worker = self._queue = self._loop = None

    # --- batching (event loop side) ---------------------------------------------------------------

    def _queue_for(self, loop: asyncio.AbstractEventLoop) -> asyncio.Queue[_Request]:
        # A trainer may run each rollout under its own asyncio.run: a new loop needs its own worker.
        if self._loop is not loop or self._worker is None or self._worker.done():
            self._loop = loop
            self._queue = asyncio.Queue()
            self._worker = loop.create_task(self._serve(self._queue, loop))
        assert self._queue is not None
        return self._queue

    async def _serve(self, queue: asyncio.Queue[_Request], loop: asyncio.AbstractEventLoop) -> None:
        while True:
            batch = [await queue.get()]
            try:
                if queue.qsize() + 1 < self.max_batch_size:
                    await asyncio.sleep(self.batch_wait_s)
            except asyncio.CancelledError:
                for request in batch:
                    _fail(request, RuntimeError(_CLOSED))
                raise
            while len(batch) < self.max_batch_size and not queue.empty():
                batch.append(queue.get_nowait())
            batch = [r for r in batch if not r.future.done()]  # callers that were cancelled meanwhile
            if not batch:
                continue
            try:
                await asyncio.to_thread(self._run_batch, batch, loop)
            except Exception as exc:  # the whole batch fails together, e.g. out of memory
                for request in batch:
                    _fail(request, exc)

    # --- one batch (worker thread) ----------------------------------------------------------------

    def _run_batch(self, batch: list[_Request], loop: asyncio.AbstractEventLoop) -> None:
        modes = [(m, m.training) for m in self.model.modules()]
        self.model.eval()
        threads = torch.get_num_threads()
        if self.threads is not None:
            torch.set_num_threads(self.threads)
        try:
            with torch.no_grad():
                self._decode(batch, loop)
        finally:
            torch.set_num_threads(threads)
            for module, training in modes:
                module.training = training

    def _forward(
        self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, cache: Any
    ) -> tuple[torch.Tensor, Any]:
        kwargs = {"logits_to_keep": 1} if self._logits_to_keep else {}
        out = self.model(
            input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache, use_cache=True, **kwargs
        )
        self.stats.forward_passes += 1
        return out.logits[:, -1, :].float(), out.past_key_values

    def _decode(self, batch: list[_Request], loop: asyncio.AbstractEventLoop) -> None:
        self.stats.batches += 1
        self.stats.requests += len(batch)
        for r in batch:
            if r.params.seed is not None:
                r.generator = torch.Generator(device=self.device).manual_seed(r.params.seed)
        width = max(len(r.prompt_ids) for r in batch)
        ids = torch.full((len(batch), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for i, r in enumerate(batch):
            ids[i, width - len(r.prompt_ids) :] = torch.tensor(r.prompt_ids)
            mask[i, width - len(r.prompt_ids) :] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        # Positions count real tokens only, so a left-padded row sees the positions it would alone.
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        logits, cache = self._forward(ids, mask, positions, None)
        positions = positions[:, -1:]
        rows = list(batch)
        while True:
            tokens, logprobs = self._sample(logits, rows)
            keep = []
            for j, (r, tok, lp) in enumerate(zip(rows, tokens.tolist(), logprobs.tolist())):
                r.tokens.append(tok)
                r.logprobs.append(lp)
                if tok in r.params.stop_token_ids or (r.params.stop and self._hit_stop(r)):
                    self._finish(r, "stop", loop)
                elif len(r.tokens) >= r.params.max_tokens:
                    self._finish(r, "length", loop)
                else:
                    keep.append(j)
            if not keep:
                return
            if len(keep) < len(rows):
                index = torch.tensor(keep, device=self.device)
                cache.batch_select_indices(index)
                tokens, mask, positions = tokens[index], mask[index], positions[index]
                rows = [rows[j] for j in keep]
            mask = torch.cat([mask, mask.new_ones((len(rows), 1))], dim=1)
            positions = positions + 1
            logits, cache = self._forward(tokens[:, None], mask, positions, cache)

    def _hit_stop(self, r: _Request) -> bool:
        """Whether the token just sampled completes a stop string. Only the tail is decoded: a string
        of n characters that ends at this token lies within its last 2n + 4 tokens."""
        width = 2 * max(len(s) for s in r.params.stop) + 4
        tail = self.tokenizer.decode(r.tokens[-width:])
        return any(s in tail for s in r.params.stop)

    def _sample(self, logits: torch.Tensor, rows: list[_Request]) -> tuple[torch.Tensor, torch.Tensor]:
        """Next token of every row (argmax where T = 0) and its logprob at temperature T, unfiltered."""
        temps = torch.tensor([r.params.temperature or 1.0 for r in rows], device=logits.device)
        logp = torch.log_softmax(logits / temps[:, None], dim=-1)
        tokens = logits.argmax(dim=-1)
        sampled = [j for j, r in enumerate(rows) if r.params.temperature > 0]
        if sampled:
            index = torch.tensor(sampled, device=logits.device)
            probs = self._filtered(logp[index], [rows[j].params for j in sampled]).exp()
            drawn = tokens.clone()
            unseeded = [k for k, j in enumerate(sampled) if rows[j].generator is None]
            if unseeded:
                drawn[index[unseeded]] = torch.multinomial(probs[unseeded], 1).squeeze(1)
            seeded = [k for k, j in enumerate(sampled) if rows[j].generator is not None]
            if seeded:  # inverse CDF: one uniform per row from its own generator, then one batched search
                u = torch.stack(
                    [torch.rand((), generator=rows[sampled[k]].generator, device=logits.device) for k in seeded]
                )
                cdf = probs[seeded].cumsum(dim=-1)
                picked = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True).squeeze(1)
                drawn[index[seeded]] = picked.clamp(max=probs.shape[-1] - 1)
            tokens = drawn
        return tokens, logp.gather(1, tokens[:, None]).squeeze(1)

    @staticmethod
    def _filtered(logp: torch.Tensor, params: list[SamplingParams]) -> torch.Tensor:
        """Renormalised logprobs after each row's top-k and top-p (nucleus) cut."""
        vocab = logp.shape[-1]
        top_k = [p.top_k if 0 < p.top_k < vocab else vocab for p in params]
        top_p = [p.top_p for p in params]
        if all(k == vocab for k in top_k) and all(p >= 1.0 for p in top_p):
            return logp
        sorted_logp, order = logp.sort(dim=-1, descending=True)
        rank = torch.arange(vocab, device=logp.device)[None, :]
        drop = rank >= torch.tensor(top_k, device=logp.device)[:, None]
        probs = sorted_logp.exp()
        # Keep the smallest prefix whose mass reaches top_p: a token goes when the mass before it does.
        drop |= (probs.cumsum(dim=-1) - probs) >= torch.tensor(top_p, device=logp.device)[:, None]
        drop[:, 0] = False
        sorted_logp = sorted_logp.masked_fill(drop, float("-inf"))
        cut = torch.full_like(logp, float("-inf")).scatter(1, order, sorted_logp)
        return torch.log_softmax(cut, dim=-1)

    def _finish(self, r: _Request, reason: Literal["stop", "length"], loop: asyncio.AbstractEventLoop) -> None:
        self.stats.generated_tokens += len(r.tokens)
        generation = Generation(token_ids=r.tokens, logprobs=r.logprobs, finish_reason=reason)
        loop.call_soon_threadsafe(_settle, r.future, generation)


def _settle(future: asyncio.Future[Generation], generation: Generation) -> None:
    if not future.done():  # the caller may have been cancelled
        future.set_result(generation)


def _fail(request: _Request, exc: BaseException) -> None:
    if not request.future.done():
        request.future.set_exception(exc)
