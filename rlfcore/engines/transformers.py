"""A rollout engine on a torch causal LM in this process: the local backend's policy, on CPU or one GPU.

Concurrent ``generate`` calls (one per trajectory turn) are gathered into batches, because one
forward pass over 32 rows costs about as much as one over a single row. The engine samples from the
model object it was given, never a copy, so a trainer that updates ``engine.model`` in place is
generating from its newest weights at the next batch.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import threading
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
import torch.nn.functional as F

from rlfcore.engines import decoder, kvcache
from rlfcore.engines.base import Engine, Generation, SamplingParams
from rlfcore.engines.sampling import cut_probs
from rlfcore.threads import start_in_thread

_CLOSED = "TransformersEngine was closed before this request ran"
DRAIN_S = 30.0
"""How long a closing engine waits for its decoding thread to stop (:meth:`TransformersEngine._decoded`)."""
_CDF_BLOCK = 1024
"""Tokens per block of a seeded draw's two-level inverse CDF (:func:`_inverse_cdf`), for a
vocabulary of more than four blocks."""


@dataclass
class EngineStats:
    """Counters a benchmark or a test reads: prefills run (``batches``), requests served, requests that
    joined rows already decoding, forward passes, tokens made."""

    batches: int = 0
    joins: int = 0
    reused_tokens: int = 0
    """Prompt tokens whose KV cache came from the trajectory's previous turn instead of a prefill."""
    shared_prompt_tokens: int = 0
    """Prompt tokens not prefilled because another request of the same prefill had the same prompt."""
    requests: int = 0
    forward_passes: int = 0
    generated_tokens: int = 0
    refills: int = 0
    """Rows prefilled again, prompt and tokens so far, because the weights changed under them."""


@dataclass
class _Request:
    prompt_ids: list[int]
    params: SamplingParams
    future: asyncio.Future[Generation]
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    generator: torch.Generator | None = None
    request_id: str = ""
    version: int = 0
    """The policy version its pending logits were computed with (``record_versions``)."""

    @property
    def context(self) -> list[int]:
        """What a prefill of this row reads: its prompt, and the tokens generated so far (a refill)."""
        return self.prompt_ids + self.tokens if self.tokens else self.prompt_ids

    versions: list[int] = field(default_factory=list)
    kept_logmass: list[float] = field(default_factory=list)


@dataclass
class _Prefix:
    """A finished row's KV cache, kept for its trajectory's next turn: the ids it covers, each layer's
    keys and values ``[heads, len(ids), head_dim]``, and the weights' version it was computed with."""

    ids: list[int]
    kv: list[tuple[torch.Tensor, torch.Tensor]]
    version: int

    @property
    def nbytes(self) -> int:
        return sum(k.nbytes + v.nbytes for k, v in self.kv)


class _Batch:
    """The rows decoding together: their requests, last logits, attention mask, positions and KV cache."""

    def __init__(self) -> None:
        self.rows: list[_Request] = []
        self.logits = torch.empty(0)
        self.mask = torch.empty(0, dtype=torch.long)
        self.positions = torch.empty(0, dtype=torch.long)
        self.cache: Any = None

    def merge(
        self, rows: list[_Request], logits: torch.Tensor, cache: Any, mask: torch.Tensor, positions: torch.Tensor
    ) -> None:
        """Append freshly prefilled rows; the shorter side's mask and KV rows are left-padded to match."""
        if not self.rows:
            self.rows, self.logits, self.cache, self.mask, self.positions = list(rows), logits, cache, mask, positions
            return
        width = max(self.mask.shape[1], mask.shape[1])
        for layer, other in zip(self.cache.layers, cache.layers, strict=True):
            layer.join(other)
        self.mask = torch.cat([_pad_left(self.mask, width), _pad_left(mask, width)])
        self.positions = torch.cat([self.positions, positions])
        self.logits = torch.cat([self.logits, logits])
        self.rows.extend(rows)

    def row_kv(self, j: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Row ``j``'s keys and values at the columns it attends to, layer by layer (empty if unmergeable)."""
        if not _mergeable(self.cache):
            return []
        cols = self.mask[j].nonzero().squeeze(1)
        return [
            (layer.keys[j].index_select(1, cols), layer.values[j].index_select(1, cols)) for layer in self.cache.layers
        ]

    def select(self, keep: list[int], device: torch.device) -> list[int]:
        """Keep these rows, in the order returned (old indices); cache columns that only the rows gone
        attended to are cut off."""
        if not keep:
            self.rows, self.cache = [], None
            return keep
        mergeable = _mergeable(self.cache)
        order, holes, movers = kvcache.leave(len(self.rows), keep) if mergeable else (keep, [], [])
        self.rows = [self.rows[j] for j in order]
        index = torch.tensor(order, dtype=torch.long, device=device)
        self.mask, self.positions = self.mask.index_select(0, index), self.positions.index_select(0, index)
        self.logits = self.logits.index_select(0, index)
        if not mergeable:
            self.cache.batch_select_indices(index)
            return order
        start = int(self.mask.any(dim=0).int().argmax())  # the first column some row still attends to
        self.mask = self.mask[:, start:]
        into = torch.tensor(holes, dtype=torch.long, device=device)
        out = torch.tensor(movers, dtype=torch.long, device=device)
        for layer in self.cache.layers:
            layer.move_rows(into, out, len(order), start)
        return order


def _pad_left(t: torch.Tensor, width: int) -> torch.Tensor:
    """``t``, a mask ``[B, L]``, with zero columns before its ``L`` up to ``width``."""
    missing = width - t.shape[1]
    return t if missing == 0 else torch.cat([t.new_zeros((t.shape[0], missing)), t], dim=1)


def _mergeable(cache: Any) -> bool:
    """Whether every layer of ``cache`` is the engine's own, whose rows may be joined and columns cut."""
    layers = getattr(cache, "layers", None)
    return layers is not None and all(type(layer) is kvcache.SlotLayer for layer in layers)


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
    """Continuously batched sampling from a Hugging Face causal LM with a KV cache.

    Scheduling (``scheduling="continuous"``, the default): the batch is refilled between decode steps.
    A request that arrives while others decode is prefilled at the next step, its KV cache rows are
    merged into the running cache (left-padded to a common length) and it decodes alongside them; a row
    that finishes leaves at once (its KV rows are removed) and its caller is answered, so in a multi-turn
    rollout a trajectory back from a tool call never waits for another one's tail. Up to
    ``max_batch_size`` rows decode together; the rest wait their turn. From idle, a request waits
    ``batch_wait_s`` (a few ms) for others, so a step's first turns are prefilled together.
    ``scheduling="static"`` is the former engine, kept as the peer of ``benchmarks/engine_throughput.py``:
    requests that arrive while a batch decodes wait for all of it to finish.

    For a model whose layers all attend to the whole sequence, the KV cache is the engine's own
    (:mod:`rlfcore.engines.kvcache`: buffers written in place, rows joining and leaving by copying only
    themselves) and, under eager or SDPA attention, a forward pass attends with grouped K/V heads
    without repeating them; other models keep their own cache, and rows then join only an idle engine.
    For Llama, Qwen2 and Qwen3 models, forward passes skip transformers' module machinery
    (:mod:`rlfcore.engines.decoder`: the same operations on the same weights, bit-for-bit the same logits).

    The forward passes run in a worker thread, so the event loop keeps serving tool calls meanwhile.
    While rows decode the model is in eval mode under ``torch.no_grad()``; each module's training flag is
    restored when the engine falls idle. (``no_grad``, not ``inference_mode``: buffers a forward pass may
    rewrite, such as dynamic RoPE frequencies, must stay usable by the trainer's autograd.)

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
        scheduling: Literal["continuous", "static"] = "continuous",
    ):
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be at least 1, got {max_batch_size}")
        if scheduling not in ("continuous", "static"):
            raise ValueError(f"scheduling: {scheduling!r} is not one of continuous, static")
        self.model = model
        if device is not None:
            self.device = resolve_device(device)
            model.to(self.device)  # in place: parameters stay the same objects the trainer holds
        else:
            self.device = next(model.parameters()).device
        self.max_batch_size = max_batch_size
        self.batch_wait_s = batch_wait_s
        self.tokenizer = tokenizer
        self.scheduling = scheduling
        self.threads = threads
        """torch's intra-op threads while rows decode (``None``: leave them as they are)."""
        config_pad = getattr(model.config, "pad_token_id", None)
        self.pad_token_id = pad_token_id if pad_token_id is not None else (config_pad if config_pad is not None else 0)
        self.stats = EngineStats()
        self.weights_lock = threading.Lock()
        """Held for each decode step: a trainer that changes the weights while rows decode (asynchronous
        GRPO) holds it too, so new weights reach the rows between steps, never within one."""
        self.policy_version = 0
        """The version of the weights, as the trainer counts its updates (set under ``weights_lock``)."""
        self.record_versions = False
        """Report, per generated token, the policy version it was sampled with and the log of the mass
        the top-k/top-p cut kept (:class:`~rlfcore.engines.base.Generation`)."""
        self.refill_on_new_weights = False
        """When ``policy_version`` moves while rows decode, prefill them again (prompt and tokens so far)
        under the new weights, so no row goes on from keys and values the older weights computed."""
        self._logits_to_keep = "logits_to_keep" in inspect.signature(model.forward).parameters
        self._dtype = next(model.parameters()).dtype
        self._slots = kvcache.full_attention(model)
        """Whether the engine keeps the KV cache (:class:`~rlfcore.engines.kvcache.SlotLayer` s): rows
        then join and leave a running batch; a model with sliding or linear layers keeps its own."""
        self._grouped = (
            self._slots
            and getattr(model.config, "_attn_implementation", None) in ("eager", "sdpa")
            and not getattr(model.config, "sub_configs", None)
        )
        """Whether rows decode with :func:`~rlfcore.engines.kvcache.grouped_attention` (on a 4D mask the
        engine builds) in place of the model's eager or SDPA attention, which copies K/V per query head."""
        if self._grouped:
            kvcache.register()
        self._own_forward = self._grouped and decoder.supports(model)
        """Whether forward passes run :func:`rlfcore.engines.decoder.forward` (the same logits, less
        Python), unless a forward hook is registered on the model."""
        self._modules = list(model.modules())
        self._params: list[torch.nn.Parameter] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._inbox: collections.deque[_Request] = collections.deque()
        self._wake: asyncio.Event | None = None
        self._worker: asyncio.Task[None] | None = None
        # Hand-made, not cachetools: two bounds at once (rows and bytes), and an entry is popped when taken.
        self._prefixes: collections.OrderedDict[str, _Prefix] = collections.OrderedDict()
        self._prefix_bytes = 0
        self.max_prefixes = 4 * max_batch_size
        """Finished rows' KV caches kept for their trajectories' next turns (continuous scheduling)."""
        self.max_prefix_bytes = 512 << 20
        """...and the memory they may hold together; the least recently kept go first."""

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
        request = _Request(list(prompt_ids), params, loop.create_future(), request_id=request_id)
        wake = self._wake_for(loop)
        self._inbox.append(request)  # deque appends are atomic: the decoding thread reads it between steps
        wake.set()
        return await request.future

    async def close(self) -> None:
        """Stop serving; requests still waiting fail. Rows already decoding finish in their thread."""
        if self._worker is not None:
            self._worker.cancel()
        self._fail_waiting()
        self._worker = self._wake = self._loop = None

    # --- serving (event loop side) ----------------------------------------------------------------

    def _wake_for(self, loop: asyncio.AbstractEventLoop) -> asyncio.Event:
        # A run has one loop, but an engine may outlive it (tests, scripts): a new loop needs its own worker.
        if self._loop is not loop or self._worker is None or self._worker.done() or self._wake is None:
            self._loop = loop
            self._inbox = collections.deque()  # a thread still decoding for a loop that is gone keeps the old one
            self._wake = asyncio.Event()
            self._worker = loop.create_task(self._serve(self._wake, self._inbox))
        return self._wake

    def _fail_waiting(self) -> None:
        while self._inbox:
            _fail(self._inbox.popleft(), RuntimeError(_CLOSED))

    async def _serve(self, wake: asyncio.Event, inbox: collections.deque[_Request]) -> None:
        while True:
            await wake.wait()
            wake.clear()
            if len(inbox) < self.max_batch_size:
                await asyncio.sleep(self.batch_wait_s)  # from idle: let a step's first turns gather
            if inbox:
                await self._decoded(inbox)

    async def _decoded(self, inbox: collections.deque[_Request]) -> None:
        """Decode in a thread of its own (code that fills asyncio's default executor, an agent's
        blocking client waiting on this engine, must not keep it from decoding) until the inbox is
        empty. Cancelled (the run is closing, its callers are cancelled too), it waits up to
        ``DRAIN_S`` for the thread, which drops cancelled rows at its next step: torch still running
        in a thread as the interpreter exits aborts the process."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()

        def settle(ok: bool, value: Any) -> None:
            if not done.done():
                done.set_result(None) if ok else done.set_exception(value)

        start_in_thread(self._run, {"inbox": inbox}, settle)
        try:
            await asyncio.shield(done)
        except asyncio.CancelledError:
            await asyncio.wait([done], timeout=DRAIN_S)
            raise

    # --- decoding (worker thread) -----------------------------------------------------------------

    def _run(self, inbox: collections.deque[_Request]) -> None:
        """Decode until no row is left and nothing waits; a failing forward fails the rows it held."""
        modes = [(m, m.training) for m in self.model.modules()]
        self._params = list(self.model.parameters())  # the weights' versions are read at every step that ends a row
        self.model.eval()
        threads = torch.get_num_threads()
        if self.threads is not None:
            torch.set_num_threads(self.threads)
        batch = _Batch()
        try:
            with torch.no_grad():
                self._decode(batch, inbox)
        except Exception as exc:  # e.g. out of memory: these rows fail, later requests start afresh
            for r in batch.rows:
                r.future.get_loop().call_soon_threadsafe(_fail, r, exc)
        finally:
            torch.set_num_threads(threads)
            for module, training in modes:
                module.training = training

    def _forward(
        self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, cache: Any
    ) -> tuple[torch.Tensor, Any]:
        if cache is None and self._slots:
            cache = kvcache.slot_cache(self.model.config.get_text_config(decoder=True).num_hidden_layers)
        self.stats.forward_passes += 1
        if self._grouped and ids.shape[1] == 1 and _mergeable(cache) and cache.layers[0].rows:
            mask = kvcache.widen(cache, mask)  # one query after cached ones: it attends to whole buffers
        if self._own_forward and not decoder.hooked(self._modules):
            return decoder.forward(self.model, ids, mask, positions, cache).float(), cache
        kwargs = {"logits_to_keep": 1} if self._logits_to_keep else {}
        config = self.model.config
        attention = getattr(config, "_attn_implementation", None)
        if self._grouped:  # for this forward pass only: the model is the trainer's, which may run next
            config._attn_implementation = kvcache.GROUPED_ATTENTION
            mask = kvcache.additive_mask(mask, ids.shape[1], self._dtype)
        try:
            out = self.model(
                input_ids=ids,
                attention_mask=mask,
                position_ids=positions,
                past_key_values=cache,
                use_cache=True,
                **kwargs,
            )
        finally:
            if self._grouped:
                config._attn_implementation = attention
        return out.logits[:, -1, :].float(), out.past_key_values

    def _decode(self, batch: _Batch, inbox: collections.deque[_Request]) -> None:
        while self._step(batch, inbox):
            pass

    def _step(self, batch: _Batch, inbox: collections.deque[_Request]) -> bool:
        """One decode step under ``weights_lock``; False once no row is left and nothing waits."""
        with self.weights_lock:
            return self._decode_step(batch, inbox)

    def _decode_step(self, batch: _Batch, inbox: collections.deque[_Request]) -> bool:  # noqa: PLR0912 - the decode step: one place, no calls added per token
        if self.refill_on_new_weights and batch.rows and batch.rows[0].version != self.policy_version:
            stale, _ = batch.rows, batch.select([], self.device)  # every row's logits share one version
            self.stats.refills += len(stale)
            inbox.extendleft(reversed(stale))
        if self.scheduling == "continuous" or not batch.rows:
            self._admit(batch, inbox)
        if not batch.rows:
            return False
        live = [j for j, r in enumerate(batch.rows) if not r.future.done()]
        if len(live) < len(batch.rows):  # their callers were cancelled: decoding them is wasted
            batch.select(live, self.device)
            if not batch.rows:
                return True
        tokens, logprobs, kept = self._sample(batch.logits, batch.rows)
        keep: list[int] = []
        done: list[tuple[int, _Request, Literal["stop", "length"]]] = []
        if kept is not None:
            for r, mass in zip(batch.rows, kept.tolist()):
                r.versions.append(r.version)
                r.kept_logmass.append(mass)
        for j, (r, tok, lp) in enumerate(zip(batch.rows, tokens.tolist(), logprobs.tolist())):
            r.tokens.append(tok)
            r.logprobs.append(lp)
            if tok in r.params.stop_token_ids or (r.params.stop and self._hit_stop(r)):
                reason: Literal["stop", "length"] = "stop"
            elif len(r.tokens) >= r.params.max_tokens:
                reason = "length"
            else:
                keep.append(j)
                continue
            done.append((j, r, reason))
        version = self._weights_version() if done and self.scheduling == "continuous" else 0
        for j, r, _ in done:
            if r.request_id and self.scheduling == "continuous":  # kept before the caller can send its next turn
                self._keep_prefix(r, batch.row_kv(j), version)
        if done:
            self._finish([(r, reason) for _, r, reason in done])
        if len(keep) < len(batch.rows):
            order = batch.select(keep, self.device)
            tokens = tokens.index_select(0, torch.tensor(order, dtype=torch.long, device=self.device))
        if not batch.rows:
            return True  # the next step may start with requests that arrived meanwhile
        batch.mask = torch.cat([batch.mask, batch.mask.new_ones((len(batch.rows), 1))], dim=1)
        batch.positions = batch.positions + 1
        batch.logits, batch.cache = self._forward(tokens[:, None], batch.mask, batch.positions, batch.cache)
        if self.record_versions or self.refill_on_new_weights:
            for r in batch.rows:
                r.version = self.policy_version
        return True

    def _admit(self, batch: _Batch, inbox: collections.deque[_Request]) -> None:  # noqa: PLR0912, PLR0915 - admission runs between decode steps, in one place
        """Prefill the requests waiting, up to the free rows, and merge them into the running batch."""
        new: list[_Request] = []
        while inbox and len(batch.rows) + len(new) < self.max_batch_size:
            r = inbox.popleft()
            if not r.future.done():  # callers cancelled meanwhile are dropped
                new.append(r)
        if not new:
            return
        if batch.rows and not _mergeable(batch.cache):
            for r in reversed(new):  # this cache's layers cannot be padded: they start with the next batch
                inbox.appendleft(r)
            return
        self.stats.batches += 1
        self.stats.requests += sum(1 for r in new if not r.tokens)
        if batch.rows:
            self.stats.joins += len(new)
        for r in new:
            if r.params.seed is not None and r.generator is None:  # a refilled row keeps its draws
                r.generator = torch.Generator(device=self.device).manual_seed(r.params.seed)
        all_prefixes = [self._take_prefix(r) for r in new]
        # Requests with the same prompt and no cached prefix (a GRPO group's first turn) are prefilled
        # once; their rows are copies of it, each then sampling with its own seed.
        distinct: dict[tuple[int, ...], int] = {}
        row_of: list[int] = []
        firsts: list[int] = []
        for i, (r, p) in enumerate(zip(new, all_prefixes)):
            key = tuple(r.context) if p is None else None
            if key is not None and key in distinct:
                row_of.append(distinct[key])
                self.stats.shared_prompt_tokens += len(r.context)
                continue
            if key is not None:
                distinct[key] = len(firsts)
            row_of.append(len(firsts))
            firsts.append(i)
        prefixes = [all_prefixes[i] for i in firsts]
        cached = [len(p.ids) if p else 0 for p in prefixes]
        suffix = [len(new[i].context) - c for i, c in zip(firsts, cached)]
        self.stats.reused_tokens += sum(cached)
        # Row i: [pads][its cached prefix] [pads][the rest of its prompt]; pads are masked out, and the
        # positions count real tokens only, so every row sees the positions it would alone.
        past, width = max(cached), max(suffix)
        ids = torch.full((len(firsts), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(firsts), past + width), dtype=torch.long)
        for i, (r, c, n) in enumerate(zip([new[i] for i in firsts], cached, suffix)):
            ids[i, width - n :] = torch.tensor(r.context[c:])
            mask[i, past - c : past] = 1
            mask[i, past + width - n :] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, past:]
        cache = kvcache.prefix_cache([p.kv if p else None for p in prefixes], past) if past else None
        try:
            logits, cache = self._forward(ids, mask, positions, cache)
            if len(firsts) < len(new):
                index = torch.tensor(row_of, dtype=torch.long, device=self.device)
                cache.batch_select_indices(index)
                logits, mask, positions = (t.index_select(0, index) for t in (logits, mask, positions))
        except Exception:
            batch.rows.extend(new)  # they fail with the batch
            raise
        for r in new:
            r.version = self.policy_version
        batch.merge(new, logits, cache, mask, positions[:, -1:])

    def _weights_version(self) -> int:
        """Changes whenever a parameter is written in place (an optimizer step, a weight sync)."""
        return sum(p._version for p in self._params)

    def _keep_prefix(self, r: _Request, kv: list[tuple[torch.Tensor, torch.Tensor]], version: int) -> None:
        # The cache covers the prompt and every token but the last, which was sampled, not yet fed.
        ids = r.prompt_ids + r.tokens[:-1]
        if kv and kv[0][0].shape[-2] == len(ids):
            self._drop_prefix(r.request_id)
            self._prefixes[r.request_id] = prefix = _Prefix(ids, kv, version)
            self._prefix_bytes += prefix.nbytes
            while self._prefixes and (
                len(self._prefixes) > self.max_prefixes or self._prefix_bytes > self.max_prefix_bytes
            ):
                self._drop_prefix(next(iter(self._prefixes)))

    def _drop_prefix(self, request_id: str) -> _Prefix | None:
        prefix = self._prefixes.pop(request_id, None)
        if prefix is not None:
            self._prefix_bytes -= prefix.nbytes
        return prefix

    def _take_prefix(self, r: _Request) -> _Prefix | None:
        """The KV cache of this trajectory's previous turn, if this prompt continues it under the same weights."""
        prefix = self._drop_prefix(r.request_id) if r.request_id else None
        if prefix is None:
            return None
        if prefix.version != self._weights_version():  # new weights: every cache kept is stale
            for request_id in list(self._prefixes):
                self._drop_prefix(request_id)
            return None
        n = len(prefix.ids)
        if n >= len(r.prompt_ids) or r.prompt_ids[:n] != prefix.ids:
            return None
        return prefix

    def _hit_stop(self, r: _Request) -> bool:
        """Whether the token just sampled completes a stop string. Only the tail is decoded: a string
        of n characters that ends at this token lies within its last 2n + 4 tokens."""
        width = 2 * max(len(s) for s in r.params.stop) + 4
        tail = self.tokenizer.decode(r.tokens[-width:])
        return any(s in tail for s in r.params.stop)

    def _sample(
        self, logits: torch.Tensor, rows: list[_Request]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Next token of every row (argmax where T = 0), its logprob at temperature T, unfiltered, and
        (``record_versions``) the log of the mass each row's top-k/top-p cut kept (0 for greedy rows)."""
        temps = [r.params.temperature or 1.0 for r in rows]
        if any(t != 1.0 for t in temps):
            logits = logits / torch.tensor(temps, device=logits.device)[:, None]  # argmax unchanged: T > 0
        logp = torch.log_softmax(logits, dim=-1)
        sampled = [j for j, r in enumerate(rows) if r.params.temperature > 0]
        kept = torch.zeros(len(rows), device=logits.device) if self.record_versions else None
        if not sampled:
            tokens = logits.argmax(dim=-1)
        else:
            probs = self._filtered_probs(_take(logp, sampled), [rows[j].params for j in sampled])
            if kept is not None:
                kept = _put(kept, sampled, probs.sum(-1).log())
            drawn = torch.empty(len(sampled), dtype=torch.long, device=logits.device)
            unseeded = [k for k, j in enumerate(sampled) if rows[j].generator is None]
            if unseeded:
                drawn = _put(drawn, unseeded, torch.multinomial(_take(probs, unseeded), 1).squeeze(1))
            seeded = [k for k, j in enumerate(sampled) if rows[j].generator is not None]
            if seeded:  # inverse CDF: one uniform per row from its own generator, then one batched search
                u = torch.stack(
                    [torch.rand((), generator=rows[sampled[k]].generator, device=logits.device) for k in seeded]
                )
                drawn = _put(drawn, seeded, _inverse_cdf(_take(probs, seeded), u))
            tokens = drawn if len(sampled) == len(rows) else _put(logits.argmax(dim=-1), sampled, drawn)
        return tokens, logp.gather(1, tokens[:, None]).squeeze(1), kept

    @staticmethod
    def _filtered_probs(logp: torch.Tensor, params: list[SamplingParams]) -> torch.Tensor:
        """Probabilities in proportion to each row's distribution after its top-k and top-p cut, not
        renormalised (both draws scale by the kept mass)."""
        return cut_probs(logp, [p.top_k for p in params], [p.top_p for p in params])

    def _finish(self, ended: list[tuple[_Request, Literal["stop", "length"]]]) -> None:
        """Answer the rows that ended at this step with one wake-up of their loop (a run serves one
        loop's inbox, so its rows share that loop)."""
        settled = []
        for r, reason in ended:
            self.stats.generated_tokens += len(r.tokens)
            versions = (r.versions, r.kept_logmass) if self.record_versions else (None, None)
            settled.append((r.future, Generation(r.tokens, r.logprobs, reason, *versions)))
        ended[0][0].future.get_loop().call_soon_threadsafe(_settle, settled)


def _inverse_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Each row's first token whose cumulative mass exceeds ``u`` (in [0, 1)) times the row's total.

    In two levels, blocks of :data:`_CDF_BLOCK` tokens, then the cumulative sum within the block
    found: over a whole vocabulary it is sequential (5 ms for 64 rows × 49,152 tokens, 1 with blocks).
    A token of zero mass is never picked, whatever the rounding."""
    rows, vocab = probs.shape
    size = _CDF_BLOCK if vocab > 4 * _CDF_BLOCK else vocab  # a small vocabulary is one block
    blocks = -(-vocab // size)
    tiled = F.pad(probs, (0, blocks * size - vocab)) if vocab % size else probs
    tiled = tiled.reshape(rows * blocks, size)
    sums = tiled.sum(-1).view(rows, blocks)
    cum = sums.cumsum(-1)
    target = u * cum[:, -1]
    last = (cum < cum[:, -1:]).sum(-1)  # the last block with mass
    block = torch.minimum(torch.searchsorted(cum, target[:, None], right=True).squeeze(1), last)
    inside = tiled.index_select(0, torch.arange(rows, device=probs.device) * blocks + block).cumsum(-1)
    rest = target - (cum - sums).gather(1, block[:, None]).squeeze(1)
    end = (inside < inside[:, -1:]).sum(-1)  # the block's last token with mass
    picked = torch.minimum(torch.searchsorted(inside, rest[:, None], right=True).squeeze(1), end)
    return block * size + picked


def _take(t: torch.Tensor, index: list[int]) -> torch.Tensor:
    """Rows ``index`` (ascending) of ``t``: ``t`` itself when they are all its rows.

    ``index_select``, not ``t[index]``: advanced indexing costs four times as much at these sizes."""
    return t if len(index) == t.shape[0] else t.index_select(0, torch.tensor(index, device=t.device))


def _put(t: torch.Tensor, index: list[int], values: torch.Tensor) -> torch.Tensor:
    """``t`` with rows ``index`` (ascending) replaced by ``values``: ``values`` when they are all its rows."""
    return values if len(index) == t.shape[0] else t.index_copy(0, torch.tensor(index, device=t.device), values)


def _settle(settled: list[tuple[asyncio.Future[Generation], Generation]]) -> None:
    for future, generation in settled:
        if not future.done():  # the caller may have been cancelled
            future.set_result(generation)


def _fail(request: _Request, exc: BaseException) -> None:
    if not request.future.done():
        request.future.set_exception(exc)
