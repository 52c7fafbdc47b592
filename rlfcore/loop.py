"""The multi-turn loop: generate → parse → invoke → observe, token-exact.

Each trajectory is one sequence of token ids: the rendered prompt, then turns of generated tokens
(kept verbatim with their logprobs, loss mask 1) and observation tokens (loss mask 0). Observation
tokens come from :class:`~rlfcore.sequences.SequenceBuilder`, so history is never re-tokenised; a
sanity check compares the finished sequence with a full rendering and records where the template
breaks the prefix property (Qwen3's drops earlier ``<think>`` blocks). Trajectories run concurrently;
a trajectory waiting on a tool never holds up another's generation.

An observation may instead be raw text that continues the assistant's turn (:func:`continuation`,
Search-R1's ``<information>`` block after a stop at ``</search>``): it is encoded on its own, and
the assistant message grows by the generated and the observed text.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from rlfcore.chat import ChatTokenizer, reads_reasoning
from rlfcore.context import TurnContext
from rlfcore.data import Row
from rlfcore.engines.base import Engine, SamplingParams
from rlfcore.runtime import Runtime
from rlfcore.sequences import REASONING_DROPPED, RolloutTokens, SequenceBuilder, differs_in_reasoning_only
from rlfcore.sessions import TrajectorySessions
from rlfcore.types import Message, ToolCall, ToolResult

StopReason = Literal[
    "answer",
    "no_tool_call",
    "unreadable_call",
    "max_turns",
    "max_tokens",
    "max_total_tokens",
    "max_response_tokens",
    "error",
]


def length_stop(budget: int, room_total: int, room_response: int) -> StopReason:
    """Which limit a turn that generated its whole ``budget`` ran into: the trajectory's total or
    response tokens, else the turn's own ``rollout.sampling.max_tokens``."""
    if budget == room_total:
        return "max_total_tokens"
    return "max_response_tokens" if budget == room_response else "max_tokens"


@dataclass
class Trajectory:
    """One rollout, as one flat record (``rlf eval``'s JSON line, a training sample, verl's trace).

    Its fields come in four groups, each filled by one stage: what was said (``messages``, set by the
    loop), what is trained (the token fields, set by the loop's token builder), how it went (counts,
    stop reason, errors and timings, set by the loop and the executor), and what it earned (the reward
    fields, set by the reward pipeline). The record stays flat so that every consumer reads one shape.
    """

    # what was said
    id: str
    """``ROW_ID#k``: the row and which of its ``rollout.n`` samples this is."""
    row_id: str
    env: str | None
    """The environment (a named group of plugins) the row was routed to; ``None``: the default."""
    messages: list[Message]
    """The conversation as people and plugins read it, tool calls and observations included."""

    # what is trained
    prompt_ids: list[int] = field(default_factory=list)
    """The rendered prompt's tokens, before the first assistant turn."""
    response_ids: list[int] = field(default_factory=list)
    """Every token after the prompt: generated ones and the observations between them."""
    response_mask: list[int] = field(default_factory=list)
    """1 where ``response_ids`` was generated (trained on), 0 where the loop added it."""
    logprobs: list[float] = field(default_factory=list)
    """The engine's log-probability of each ``response_ids`` token (0 where the mask is 0)."""

    # how it went
    num_turns: int = 0
    """Assistant turns generated."""
    tool_calls: int = 0
    tool_errors: int = 0
    tool_error_kinds: dict[str, int] = field(default_factory=dict)
    """Failed calls by kind (``timeout``, ``unknown_tool``, ``bad_arguments``, ...)."""
    tool_tracebacks: list[dict[str, Any]] = field(default_factory=list)
    """Where failing tools raised (turn, call id, tool, traceback), for their authors; the model saw only the message."""
    stop_reason: StopReason = "answer"
    truncated: bool = False
    """A length limit cut the last turn."""
    error: str | None = None
    """Why the trajectory ended in ``stop_reason == "error"`` (engine, hook or session failure)."""
    template_mismatch: str | None = None
    """Where the loop's tokens differ from the chat template's rendering of ``messages``, if they do."""
    generate_s: float = 0.0
    """Seconds spent waiting for the engine."""
    tools_s: float = 0.0
    """Seconds spent in tool calls."""

    # what it earned
    ground_truth: Any = None
    """The row's ``ground_truth``, for the reward hooks."""
    extra: dict[str, Any] = field(default_factory=dict)
    """The row's ``extra``, for the reward hooks."""
    reward: float = 0.0
    """The total: ``reward.weights``' weighted sum of ``reward_components``; without weights, ``score``
    (else the mean judge verdict); 0 when scoring failed."""
    reward_components: dict[str, float] = field(default_factory=dict)
    """Each named part of the reward (``score``, a judge's, a format bonus...), before weighting."""
    reward_error: str | None = None
    """Why scoring failed (the reward is then 0); the sample is kept."""
    reward_traceback: str | None = None
    """Where a failing reward hook raised (``rlf eval --debug`` shows it); the reason is ``reward_error``."""
    turn_rewards: list[float] | None = None
    """One reward per assistant turn when ``compute_score`` returned a list; their sum is ``score``."""
    session_error: str | None = None
    """Why a plugin's session of this trajectory failed to release (how it went; kept last so records
    keep their field order); the trajectory itself stands."""

    @property
    def response(self) -> str:
        """The text of the last assistant message."""
        for m in reversed(self.messages):
            if m.get("role") == "assistant":
                return m.get("content") or ""
        return ""

    def record(self) -> dict[str, Any]:
        """The JSON line written by ``rlf eval`` and kept as training samples."""
        out = asdict(self)
        out["prompt_tokens"] = len(self.prompt_ids)
        out["response_tokens"] = len(self.response_ids)
        out["generated_tokens"] = sum(self.response_mask)
        return out


class Rollout:
    """Runs trajectories of dataset rows through an engine, with the run's plugins."""

    def __init__(self, runtime: Runtime, engine: Engine, tokenizer: ChatTokenizer, tokens: RolloutTokens | None = None):
        self.runtime = runtime
        self.engine = engine
        self.tok = tokenizer
        self.cfg = runtime.config.rollout
        self.seq: RolloutTokens = tokens or SequenceBuilder(tokenizer)
        """Prompt and observation tokens; a backend may bring its own (verl's continuous-token builders)."""
        self.seed: int | None = runtime.config.rollout.sampling.seed
        """Base of the per-sample sampling seeds; the trainer sets a new one each step."""
        self._gate: asyncio.Semaphore | None = None
        self.reasoning = reads_reasoning(tokenizer)
        """Whether turns' ``<think>`` blocks are recorded as ``reasoning_content`` (the template reads it)."""

    async def run(
        self, rows: list[Row], n: int | None = None, on_done: Callable[[Trajectory], None] | None = None
    ) -> list[Trajectory]:
        """``n`` trajectories per row (default ``rollout.n``), at most ``rollout.concurrency`` at once.

        Results come back grouped by row, in row order; a trajectory that fails is recorded with
        ``stop_reason="error"``, never raised.
        """
        with _older_objects_frozen():
            groups = await asyncio.gather(*(self.group(row, n, on_done) for row in rows))
        return [t for group in groups for t in group]

    async def group(
        self, row: Row, n: int | None = None, on_done: Callable[[Trajectory], None] | None = None
    ) -> list[Trajectory]:
        """The ``n`` trajectories of one row (GRPO's group), sharing the run's concurrency limit."""
        if self._gate is None:
            self._gate = asyncio.Semaphore(self.cfg.concurrency)
        gate = self._gate

        async def one(k: int) -> Trajectory:
            async with gate:
                traj = await self.trajectory(row, f"{row.id}#{k}", sample=k)
            if on_done is not None:
                on_done(traj)
            return traj

        return list(await asyncio.gather(*(one(k) for k in range(n or self.cfg.n))))

    def _checks_template(self, traj_id: str, sample: int | None) -> bool:
        """Whether a trajectory ends with the template check. With ``group``: the group's first sample,
        or, for a caller that runs a group's samples one by one (no ``sample``), one in ``n`` by a hash
        of the trajectory's id."""
        mode = self.cfg.check_template
        if mode != "group":
            return mode
        return sample == 0 if sample is not None else zlib.crc32(traj_id.encode()) % self.cfg.n == 0

    async def trajectory(self, row: Row, traj_id: str, sample: int | None = None) -> Trajectory:
        """One trajectory of ``row``; ``sample`` is its index in its group, when the caller knows it."""
        check_template = self._checks_template(traj_id, sample)
        env = self.runtime.env_of(row.raw or {"env": row.env, "id": row.id})
        messages = list(row.prompt)
        if self.cfg.system_prompt and not (messages and messages[0].get("role") == "system"):
            messages.insert(0, {"role": "system", "content": self.cfg.system_prompt})
        traj = Trajectory(
            id=traj_id, row_id=row.id, env=env, messages=messages, ground_truth=row.ground_truth, extra=row.extra
        )
        ctx = TurnContext(
            sample_id=traj.id,
            env=traj.env,
            turn=0,
            messages=traj.messages,
            tools=self.runtime.callable_tools(traj.env),
            parser=self.cfg.parser,
            settings=self.runtime.settings(traj.env),
            config=self.runtime.config,
            row=row.raw,
            runtime=self.runtime,
        )
        sessions = TrajectorySessions(self.runtime, self.runtime.config.tools.session_timeout_s)
        try:
            await sessions.open(ctx)
            ctx.sessions = sessions.opened
            continued = await self._turns(traj, ctx)
            # Raw continuations are encoded piece by piece, not as a rendering of the messages.
            if check_template and traj.response_ids and not continued:
                traj.template_mismatch = self.check_template(traj)
        except Exception as exc:  # an engine or plugin failure ends this trajectory only
            traj.stop_reason = "error"
            traj.error = f"{type(exc).__name__}: {exc}"
        finally:  # ended, failed or cancelled: the sessions go
            problems = await sessions.close()
            if problems:
                traj.session_error = "; ".join(problems)
        return traj

    async def _turns(self, traj: Trajectory, ctx: TurnContext) -> bool:
        """The turns of one trajectory; True when an observation continued the assistant's turn."""
        schemas = [t.schema() for t in ctx.tools.values() if t.listed]
        traj.prompt_ids = self.seq.prompt_ids(traj.messages, schemas)
        if len(traj.prompt_ids) >= self.cfg.max_total_tokens:
            traj.stop_reason, traj.truncated = "max_total_tokens", True
            traj.error = (
                f"prompt has {len(traj.prompt_ids)} tokens, rollout.max_total_tokens is {self.cfg.max_total_tokens}"
            )
            return False
        eos = set(self.tok.eos_token_ids)
        inline: str | None = None
        """The assistant turn's text so far while observations continue it, else None."""
        continued = False
        for turn in range(self.cfg.max_turns):
            ctx.turn = turn
            room_response = self.cfg.max_response_tokens - len(traj.response_ids)
            room_total = self.cfg.max_total_tokens - len(traj.prompt_ids) - len(traj.response_ids)
            budget = min(self.cfg.sampling.max_tokens, room_response, room_total)
            if budget <= 0:
                traj.stop_reason = "max_response_tokens" if room_response <= room_total else "max_total_tokens"
                traj.truncated = True
                return continued
            params = SamplingParams.from_config(self.cfg.sampling, self.tok.eos_token_ids)
            params.max_tokens = budget
            if self.seed is not None:  # one seed per sample and turn: a group must not repeat itself
                params.seed = zlib.crc32(f"{self.seed}/{traj.id}/{turn}".encode())
            t0 = time.perf_counter()
            gen = await self.engine.generate(traj.prompt_ids + traj.response_ids, params, request_id=traj.id)
            traj.generate_s += time.perf_counter() - t0
            traj.num_turns += 1
            traj.response_ids += gen.token_ids
            traj.response_mask += [1] * len(gen.token_ids)
            traj.logprobs += gen.logprobs if gen.logprobs is not None else [0.0] * len(gen.token_ids)
            body = gen.token_ids[:-1] if gen.token_ids and gen.token_ids[-1] in eos else gen.token_ids
            text = self.tok.decode(body)
            if inline is not None:  # the turn an observation continued: one assistant message grows
                traj.messages.pop()
            if gen.finish_reason == "length":
                traj.messages.append({"role": "assistant", "content": text if inline is None else inline + text})
                traj.truncated = True
                traj.stop_reason = length_stop(budget, room_total, room_response)
                return continued
            calls = await self.runtime.call_first("parse_tool_calls", traj.env, text=text, ctx=ctx) or []
            message = _assistant_message(text, calls, self.reasoning)
            if inline is not None:
                message["content"] = inline + text
            traj.messages.append(message)
            if not calls:
                traj.stop_reason = "answer" if traj.tool_calls else "no_tool_call"
                return continued
            if self.cfg.unreadable_calls == "stop" and any(c.error for c in calls):
                traj.stop_reason = "unreadable_call"  # as verl's and TRL's tool loops end such a turn
                return continued
            if turn == self.cfg.max_turns - 1:
                traj.stop_reason = "max_turns"
                return continued
            results = await self._invoke(calls, ctx, traj)
            observation = await self.runtime.call_first("build_observation", traj.env, results=results, ctx=ctx)
            observation = observation or []
            raw = _continuation_text(observation)
            if raw is not None:  # raw text in the same turn; a generated end-of-turn token goes
                drop, obs_ids = int(bool(gen.token_ids) and gen.token_ids[-1] in eos), self.tok.encode(raw)
            else:
                drop, obs_ids = self.seq.context_ids(
                    traj.prompt_ids + traj.response_ids, traj.messages, traj.messages + observation, schemas
                )
            if drop > len(gen.token_ids):
                raise RuntimeError(
                    f"the token builder dropped {drop} tokens, more than the {len(gen.token_ids)} just generated"
                )
            kept = len(traj.response_ids) - drop
            if kept + len(obs_ids) > self.cfg.max_response_tokens:
                traj.stop_reason, traj.truncated = "max_response_tokens", True
                return continued
            if len(traj.prompt_ids) + kept + len(obs_ids) > self.cfg.max_total_tokens:
                traj.stop_reason, traj.truncated = "max_total_tokens", True
                return continued
            if raw is not None:
                inline = (inline or "") + text + raw
                traj.messages[-1] = {
                    "role": "assistant",
                    "content": inline,
                }  # the model wrote plain text, no call record
                continued = True
            else:
                traj.messages.extend(observation)
                inline = None
            del traj.response_ids[kept:], traj.response_mask[kept:], traj.logprobs[kept:]
            traj.response_ids += obs_ids
            traj.response_mask += [0] * len(obs_ids)
            traj.logprobs += [0.0] * len(obs_ids)
        traj.stop_reason = "max_turns"
        return continued

    async def _invoke(self, calls: list[ToolCall], ctx: TurnContext, traj: Trajectory) -> list[ToolResult]:
        t0 = time.perf_counter()
        results = await self.runtime.call_first("invoke_tools", traj.env, calls=calls, ctx=ctx)
        traj.tools_s += time.perf_counter() - t0
        if not isinstance(results, list) or len(results) != len(calls):
            got = len(results) if isinstance(results, list) else type(results).__name__
            raise RuntimeError(f"invoke_tools returned {got} results for {len(calls)} calls")
        traj.tool_calls += len(calls)
        for r in results:
            if r.error:
                traj.tool_errors += 1
                traj.tool_error_kinds[r.error] = traj.tool_error_kinds.get(r.error, 0) + 1
            if r.traceback:
                traj.tool_tracebacks.append(
                    {"turn": ctx.turn, "call_id": r.call_id, "tool": r.name, "traceback": r.traceback}
                )
        return results

    def check_template(self, traj: Trajectory) -> str | None:
        """Where the incremental sequence departs from a full rendering of the messages, or None.

        Run once, when the trajectory ends: the loop only appends, so a turn that broke the prefix
        property still shows at its own token in the whole conversation, and the report names that
        turn. Equal sequences cost one rendering, one encoding and one list comparison."""
        schemas = [t.schema() for t in self.runtime.tools_for(traj.env).values()]
        text = self.tok.render(traj.messages, schemas, add_generation_prompt=False)
        full = self.tok.encode(text)
        seq = traj.prompt_ids + traj.response_ids
        if full[: len(seq)] == seq:
            return None
        if len(full) < len(seq) and full == seq[: len(full)]:
            where = (
                f"a full rendering ends at token {len(full)}, the rollout at {len(seq)} "
                f"(it goes on {_part(traj, len(full))})"
            )
        else:
            i = next(k for k, (a, b) in enumerate(zip(seq, full)) if a != b)
            where = (
                f"token {i} ({_part(traj, i)}): rollout has {self.tok.decode(seq[i : i + 12])!r}, "
                f"a full rendering has {self.tok.decode(full[i : i + 12])!r}"
            )
        if differs_in_reasoning_only(self.tok.decode(seq), text):
            return (
                f"{REASONING_DROPPED} (the template leaves earlier <think> blocks out; the rollout keeps them): {where}"
            )
        return where


_runs_frozen = 0
_froze = False


@contextlib.contextmanager
def _older_objects_frozen() -> Iterator[None]:
    """While rollouts run, the objects made before them (the runtime, the model, every module) are
    left out of the garbage collector's full passes, which a rollout's many short-lived objects set
    off: one full pass took 28-39 ms of a 256-trajectory run's 310 ms of CPU in
    benchmarks/loop_scheduling.py, and a training process holds far more objects. They are handed
    back when the last run ends; a freeze someone else made is left alone."""
    global _runs_frozen, _froze
    if _runs_frozen == 0:
        _froze = gc.isenabled() and gc.get_freeze_count() == 0
        if _froze:
            gc.freeze()
    _runs_frozen += 1
    try:
        yield
    finally:
        _runs_frozen -= 1
        if _runs_frozen == 0 and _froze:
            gc.unfreeze()
            _froze = False


def _part(traj: Trajectory, index: int) -> str:
    """Which part of the trajectory token ``index`` of its sequence belongs to, for the check's report."""
    at = index - len(traj.prompt_ids)
    if at < 0:
        return "in the prompt"
    mask = traj.response_mask[: at + 1]
    turn = sum(1 for k, m in enumerate(mask) if m == 1 and (k == 0 or mask[k - 1] == 0))
    if mask and mask[-1] == 1:
        return f"in assistant turn {turn}"
    return f"in the observation after assistant turn {turn}"


def continuation(text: str) -> Message:
    """An observation that continues the assistant's turn with raw ``text`` (loss mask 0).

    Returned alone by ``build_observation``: the text is encoded on its own and appended right after
    the generated tokens (an end-of-turn token the model generated is dropped first), no chat
    template is applied, and the next generation resumes after it. Search-R1's ``<information>``
    block reaches the model this way; pair it with ``rollout.sampling.stop`` so a turn ends where the
    observation belongs.
    """
    return {"role": "assistant", "content": text, "continuation": True}


def _continuation_text(observation: list[Message]) -> str | None:
    marked = [m for m in observation if m.get("continuation")]
    if not marked:
        return None
    if len(observation) != 1 or observation[0].get("role") != "assistant":
        raise ValueError("a continuation must be the only message of an observation, with role 'assistant'")
    return str(observation[0].get("content") or "")


def _assistant_message(text: str, calls: list[ToolCall], reasoning: bool = False) -> Message:
    """The assistant turn as a chat template re-renders it to the generated text: the text without
    its call markup, the calls with their arguments as objects (the real templates ``tojson`` them;
    a JSON string would come back escaped), and, where the template reads it, the ``<think>`` block
    as ``reasoning_content``, split as Qwen3's template splits it."""
    content = text
    thought = None
    if reasoning and "</think>" in content:
        thought = content.split("</think>")[0].rstrip("\n").split("<think>")[-1].lstrip("\n")
        content = content.split("</think>")[-1].lstrip("\n")
    for call in calls:
        if call.raw:
            content = content.replace(call.raw, "", 1)
    message: Message = {"role": "assistant", "content": content.strip()}
    if thought is not None:
        message["reasoning_content"] = thought
    if calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in calls
        ]
    return message
