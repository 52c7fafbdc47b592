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

A trajectory is a walk through named states (:class:`State`, as verl's agent loop names its own):
the prompt, then per turn generate → parse → invoke → observe. One method,
:meth:`TurnLoop.stop_reason`, asked before every step, decides whether and how it ends; the chat
loop (:mod:`rlfcore.chatloop`) shares it and brings its own generate, parse and observe steps.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import gc
import threading
import time
import zlib
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, Generic, Literal, NamedTuple, TypeVar

from rlfcore.chat import ChatTokenizer, reads_reasoning
from rlfcore.context import TurnContext
from rlfcore.data import Row
from rlfcore.engines.base import Engine, Generation, SamplingParams
from rlfcore.runtime import Runtime
from rlfcore.sequences import (
    OWN_TOKENIZATION,
    REASONING_DROPPED,
    RolloutTokens,
    SequenceBuilder,
    differs_in_reasoning_only,
    same_text,
)
from rlfcore.sessions import TrajectorySessions
from rlfcore.types import Done, Message, ToolCall

if TYPE_CHECKING:
    from rlfcore.schema import RolloutConfig

StopReason = Literal[
    "answer",
    "no_tool_call",
    "unreadable_call",
    "max_turns",
    "max_tokens",
    "max_total_tokens",
    "max_response_tokens",
    "max_requests",
    "agent_error",
    "agent_timeout",
    "done",
    "error",
]


class Tokens(NamedTuple):
    """One token sequence to train on: a trajectory's own, or an earlier segment of an agent episode."""

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    logprobs: list[float]


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
    policy_versions: list[int] = field(default_factory=list)
    """Per ``response_ids`` token, the policy version that sampled it (-1 where the mask is 0), where
    the engine tracks versions (asynchronous training); else empty."""
    kept_logmass: list[float] = field(default_factory=list)
    """With ``policy_versions``: per token, the log of the mass the top-k/top-p cut kept (0 where
    the mask is 0); the sampling distribution's logprob is ``logprobs - kept_logmass``."""

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
    (else the mean judge verdict, else an agent's own ``agent``); 0 when scoring failed."""
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

    # agent episodes (rlfcore.agents): what the agent program returned, and its other token sequences
    answer: str | None = None
    """What an agent program returned as its answer (then :attr:`response`); ``None`` in rlf's own loop."""
    agent_reward: float | None = None
    """The reward an agent program reported for its episode (``POST /v1/rlf/reward``): the
    ``agent`` reward component."""
    segment_reason: str | None = None
    """Why the episode's last segment (this record's token fields) began, in an agent episode."""
    segments: list[dict[str, Any]] = field(default_factory=list)
    """An agent episode's earlier segments, each a context the agent started anew (it rewrote its
    history, or ran requests side by side): their ``reason`` and token fields. They share the reward."""

    @property
    def response(self) -> str:
        """The agent's answer, else the text of the last assistant message."""
        if self.answer is not None:
            return self.answer
        for m in reversed(self.messages):
            if m.get("role") == "assistant":
                return m.get("content") or ""
        return ""

    def sequences(self) -> list[Tokens]:
        """Every token sequence of the trajectory, in order: earlier segments, then its own."""
        own = Tokens(self.prompt_ids, self.response_ids, self.response_mask, self.logprobs)
        return [
            *(Tokens(s["prompt_ids"], s["response_ids"], s["response_mask"], s["logprobs"]) for s in self.segments),
            own,
        ]

    def record(self) -> dict[str, Any]:
        """The JSON line written by ``rlf eval`` and kept as training samples."""
        out = asdict(self)
        out["prompt_tokens"] = len(self.prompt_ids)
        out["response_tokens"] = len(self.response_ids)
        out["generated_tokens"] = sum(self.response_mask)
        return out


class State(Enum):
    """Where a trajectory stands: the step it takes next. The steps run in a fixed cycle (prompt, then
    generate → parse → invoke → observe per turn); :meth:`TurnLoop.stop_reason`, asked before every
    step, is the only way out of it."""

    PROMPT = "prompt"
    """Render the prompt."""
    GENERATE = "generate"
    """One assistant turn from the engine."""
    PARSE = "parse"
    """Read the turn's calls; its assistant message joins the conversation."""
    INVOKE = "invoke"
    """Run the calls and build their observation, not yet part of the trajectory."""
    OBSERVE = "observe"
    """The observation joins the trajectory; the next turn follows."""


class Room(NamedTuple):
    """Tokens a trajectory may still take: against ``rollout.max_response_tokens`` and against
    ``rollout.max_total_tokens`` (``None`` where the loop does not count them: a chat API's)."""

    response: int
    total: int | None

    @property
    def least(self) -> int:
        return self.response if self.total is None else min(self.response, self.total)

    @property
    def tighter(self) -> StopReason:
        """The limit with less room; the response's on a tie."""
        return "max_response_tokens" if self.total is None or self.response <= self.total else "max_total_tokens"


_NOT_YET = Room(0, 0)
"""A trajectory's room before its first turn is measured."""

LENGTH_LIMITS: frozenset[StopReason] = frozenset({"max_tokens", "max_total_tokens", "max_response_tokens"})
"""The stop reasons of a trajectory that a length limit cut (``Trajectory.truncated``)."""


def length_stop(budget: int, room: Room) -> StopReason:
    """Which limit a turn that generated its whole ``budget`` ran into, given the ``room`` it had: the
    trajectory's total or response tokens, else the turn's own ``rollout.sampling.max_tokens``."""
    if budget == room.total:
        return "max_total_tokens"
    return "max_response_tokens" if budget == room.response else "max_tokens"


@dataclass(eq=False, slots=True)
class Progress:
    """How far one trajectory has come: what each step leaves for the next and for the stop rule."""

    traj: Trajectory
    ctx: TurnContext
    schemas: list[dict[str, Any]]
    """The listed tools' schemas, as the prompt shows them."""
    budget: int = 0
    """The last turn's token budget."""
    before: Room = _NOT_YET
    """The room the trajectory had before the last turn."""
    cut: bool = False
    """The last turn ran into its budget (``finish_reason == "length"``); it is not parsed."""
    calls: list[ToolCall] = field(default_factory=list)
    """The last turn's calls."""
    observation: list[Message] = field(default_factory=list)
    """What ``build_observation`` made of the last turn's results."""
    observed: int | None = None
    """Tokens the observation adds to the response once it joins (net of a dropped end-of-turn token);
    ``None`` where observation tokens are not counted (a chat API's)."""
    continued: bool = False
    """An observation continued the assistant's turn as raw text (no full rendering to check against)."""
    seed: int | None = None
    """The base of this trajectory's sampling seeds (:meth:`TurnLoop.run`)."""
    done: bool = False
    """A tool of the last turn, or ``respond``, returned :class:`~rlfcore.types.Done`: the episode is over."""
    responded: list[Message] | None = None
    """``respond``'s messages for the last turn, which had no calls; ``None``: no reply."""


P = TypeVar("P", bound=Progress)


def checks_template(cfg: RolloutConfig, traj_id: str, sample: int | None) -> bool:
    """Whether a trajectory (or an agent's episode) ends with the template check, by
    ``rollout.check_template``. With ``group``: the group's first sample, or, for a caller that runs a
    group's samples one by one (no ``sample``: verl's agent loop), one in ``n`` by a hash of the id."""
    mode = cfg.check_template
    if mode != "group":
        return mode
    return sample == 0 if sample is not None else zlib.crc32(traj_id.encode()) % cfg.n == 0


class TurnLoop(abc.ABC, Generic[P]):
    """Runs trajectories of dataset rows through an engine, with the run's plugins: grouping,
    concurrency, sessions, tool calls and the stop rule. How a turn is generated, read and followed by
    its observation is the subclass's (:class:`Rollout` on token ids, ``ChatRollout`` on messages)."""

    def __init__(self, runtime: Runtime):
        self.runtime = runtime
        self.cfg = runtime.config.rollout
        self.seed: int | None = runtime.config.rollout.sampling.seed
        """Base of the per-sample sampling seeds; the trainer sets a new one each step."""
        self._gate: asyncio.Semaphore | None = None
        self._steps: dict[State, Callable[[P], Awaitable[State]]] = {
            State.PROMPT: self._prompt,
            State.GENERATE: self._generate,
            State.PARSE: self._read,
            State.INVOKE: self._invoke,
            State.OBSERVE: self._observe,
        }

    async def run(
        self,
        rows: list[Row],
        n: int | None = None,
        on_done: Callable[[Trajectory], None] | None = None,
        seed: int | None = None,
    ) -> list[Trajectory]:
        """``n`` trajectories per row (default ``rollout.n``), at most ``rollout.concurrency`` at once.

        Results come back grouped by row, in row order; a trajectory that fails is recorded with
        ``stop_reason="error"``, never raised. ``seed``: the sampling seeds' base for these rows
        (default :attr:`seed`), for runs whose steps roll out at the same time.
        """
        with _older_objects_frozen():
            groups = await asyncio.gather(*(self.group(row, n, on_done, seed) for row in rows))
        return [t for group in groups for t in group]

    async def group(
        self,
        row: Row,
        n: int | None = None,
        on_done: Callable[[Trajectory], None] | None = None,
        seed: int | None = None,
    ) -> list[Trajectory]:
        """The ``n`` trajectories of one row (GRPO's group), sharing the run's concurrency limit."""
        if self._gate is None:
            self._gate = asyncio.Semaphore(self.cfg.concurrency)
        gate = self._gate

        async def one(k: int) -> Trajectory:
            async with gate:
                traj = await self.trajectory(row, f"{row.id}#{k}", sample=k, seed=seed)
            if on_done is not None:
                on_done(traj)
            return traj

        return list(await asyncio.gather(*(one(k) for k in range(n or self.cfg.n))))

    async def trajectory(
        self, row: Row, traj_id: str, sample: int | None = None, seed: int | None = None
    ) -> Trajectory:
        """One trajectory of ``row``; ``sample`` is its index in its group, when the caller knows it."""
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
            progress = self._progress(traj, ctx, [t.schema() for t in ctx.tools.values() if t.listed])
            progress.seed = self.seed if seed is None else seed
            await self._turns(progress)
            self._ended(progress, sample)
        except Exception as exc:  # an engine or plugin failure ends this trajectory only
            traj.stop_reason = "error"
            traj.error = f"{type(exc).__name__}: {exc}"
        finally:  # ended, failed or cancelled: the sessions go
            problems = await sessions.close()
            if problems:
                traj.session_error = "; ".join(problems)
        return traj

    async def _turns(self, p: P) -> None:
        """The trajectory's steps, in their cycle, until :meth:`stop_reason` ends it."""
        state = State.PROMPT
        while (reason := self.stop_reason(state, p)) is None:
            state = await self._steps[state](p)
        p.traj.stop_reason, p.traj.truncated = reason, reason in LENGTH_LIMITS
        if reason == "max_total_tokens" and not p.traj.num_turns:
            p.traj.error = (
                f"prompt has {len(p.traj.prompt_ids)} tokens, rollout.max_total_tokens is {self.cfg.max_total_tokens}"
            )

    def stop_reason(self, state: State, p: P) -> StopReason | None:
        """How the trajectory ends before it takes the step ``state``, or None while it goes on: the
        one place that decides how trajectories end (an engine or plugin failure aside)."""
        if state is State.GENERATE:  # an episode the environment ended, or no room for one more token?
            if p.done:
                return "done"
            room = self.room(p)
            if room.least <= 0:
                return room.tighter
        elif state is State.INVOKE:  # the turn just read
            if p.cut:
                return length_stop(p.budget, p.before)
            if not p.calls and p.responded is None:
                if p.done:
                    return "done"
                return "answer" if p.traj.tool_calls else "no_tool_call"
            if self.cfg.unreadable_calls == "stop" and any(c.error for c in p.calls):
                return "unreadable_call"  # as verl's and TRL's tool loops end such a turn
            if p.traj.num_turns == self.cfg.max_turns and not p.done:  # its calls are not run, its reply not added
                return "max_turns"
        elif state is State.OBSERVE and p.observed is not None:  # does the observation fit?
            room = self.room(p)
            if room.response < p.observed:
                return "max_response_tokens"
            if room.total is not None and room.total < p.observed:
                return "max_total_tokens"
        return None

    def _sampling(self, p: P, stop_token_ids: list[int]) -> SamplingParams:
        """The next turn's sampling: its budget (kept with the room it had, for :func:`length_stop`)
        and its seed."""
        turn = p.ctx.turn = p.traj.num_turns
        p.before = self.room(p)
        p.budget = min(self.cfg.sampling.max_tokens, p.before.least)
        params = SamplingParams.from_config(self.cfg.sampling, stop_token_ids)
        params.max_tokens = p.budget
        if p.seed is not None:  # one seed per sample and turn: a group must not repeat itself
            params.seed = zlib.crc32(f"{p.seed}/{p.traj.id}/{turn}".encode())
        return params

    async def _read(self, p: P) -> State:
        """PARSE, then ``respond`` to a turn that has no calls: its reply is the next observation."""
        state = await self._parse(p)
        p.responded = None
        if p.cut or p.calls:
            return state
        answer = await self.runtime.call_first("respond", p.traj.env, messages=p.traj.messages, ctx=p.ctx)
        if isinstance(answer, Done):
            p.done = True
            answer = answer.content
        if answer is None or answer == []:
            return state
        if not isinstance(answer, list) or not all(isinstance(m, dict) and "role" in m for m in answer):
            raise TypeError(f"respond returned {type(answer).__name__}, not a list of messages (or Done, or None)")
        p.responded = answer
        return state

    async def _invoke(self, p: P) -> State:
        """INVOKE: the turn's calls through ``invoke_tools``, counted, and ``build_observation``'s
        messages of their results; for a turn without calls, ``respond``'s reply."""
        traj, ctx = p.traj, p.ctx
        if p.responded is not None:
            p.observation = p.responded
            return State.OBSERVE
        t0 = time.perf_counter()
        results = await self.runtime.call_first("invoke_tools", traj.env, calls=p.calls, ctx=ctx)
        traj.tools_s += time.perf_counter() - t0
        if not isinstance(results, list) or len(results) != len(p.calls):
            got = len(results) if isinstance(results, list) else type(results).__name__
            raise RuntimeError(f"invoke_tools returned {got} results for {len(p.calls)} calls")
        traj.tool_calls += len(p.calls)
        p.done = any(r.done for r in results)
        for r in results:
            if r.error:
                traj.tool_errors += 1
                traj.tool_error_kinds[r.error] = traj.tool_error_kinds.get(r.error, 0) + 1
            if r.traceback:
                traj.tool_tracebacks.append(
                    {"turn": ctx.turn, "call_id": r.call_id, "tool": r.name, "traceback": r.traceback}
                )
        p.observation = await self.runtime.call_first("build_observation", traj.env, results=results, ctx=ctx) or []
        return State.OBSERVE

    @abc.abstractmethod
    def _progress(self, traj: Trajectory, ctx: TurnContext, schemas: list[dict[str, Any]]) -> P:
        """A new trajectory's progress record."""

    @abc.abstractmethod
    def room(self, p: P) -> Room:
        """The tokens the trajectory may still take, as the loop counts them."""

    @abc.abstractmethod
    async def _prompt(self, p: P) -> State:
        """PROMPT: the conversation so far, as the engine reads it."""

    @abc.abstractmethod
    async def _generate(self, p: P) -> State:
        """GENERATE: one turn within :meth:`_sampling`'s budget; ``p.cut`` when it ran into it."""

    @abc.abstractmethod
    async def _parse(self, p: P) -> State:
        """PARSE: ``p.calls`` of the turn (none when it was cut), its assistant message appended."""

    @abc.abstractmethod
    async def _observe(self, p: P) -> State:
        """OBSERVE: ``p.observation`` joins the trajectory."""

    def _ended(self, p: P, sample: int | None) -> None:
        """After the last step, while the sessions are still open."""


@dataclass(eq=False, slots=True)
class TokenProgress(Progress):
    """The token loop's progress: the last generation and the observation's tokens."""

    gen: Generation = field(default_factory=lambda: Generation([], None, "stop"))
    text: str = ""
    """The last turn's text, without its end-of-turn token."""
    inline: str | None = None
    """The assistant turn's text so far while raw observations continue it, else None."""
    raw: str | None = None
    """The observation's raw text when it continues the assistant's turn (:func:`continuation`)."""
    drop: int = 0
    """Tokens at the end of the last generation the observation replaces (an end-of-turn token)."""
    obs_ids: list[int] = field(default_factory=list)


class Rollout(TurnLoop[TokenProgress]):
    """The token loop: one sequence of token ids per trajectory, kept exact across turns."""

    def __init__(self, runtime: Runtime, engine: Engine, tokenizer: ChatTokenizer, tokens: RolloutTokens | None = None):
        super().__init__(runtime)
        self.engine = engine
        self.tok = tokenizer
        self.seq: RolloutTokens = tokens or SequenceBuilder(tokenizer)
        """Prompt and observation tokens; a backend may bring its own (verl's continuous-token builders)."""
        self.reasoning = reads_reasoning(tokenizer)
        """Whether turns' ``<think>`` blocks are recorded as ``reasoning_content`` (the template reads it)."""
        self._eos = set(tokenizer.eos_token_ids)

    def _progress(self, traj: Trajectory, ctx: TurnContext, schemas: list[dict[str, Any]]) -> TokenProgress:
        return TokenProgress(traj, ctx, schemas)

    def room(self, p: TokenProgress) -> Room:
        used = len(p.traj.response_ids)
        return Room(self.cfg.max_response_tokens - used, self.cfg.max_total_tokens - len(p.traj.prompt_ids) - used)

    async def _prompt(self, p: TokenProgress) -> State:
        p.traj.prompt_ids = self.seq.prompt_ids(p.traj.messages, p.schemas)
        return State.GENERATE

    async def _generate(self, p: TokenProgress) -> State:
        traj = p.traj
        params = self._sampling(p, self.tok.eos_token_ids)
        t0 = time.perf_counter()
        gen = await self.engine.generate(traj.prompt_ids + traj.response_ids, params, request_id=traj.id)
        traj.generate_s += time.perf_counter() - t0
        traj.num_turns += 1
        traj.response_ids += gen.token_ids
        traj.response_mask += [1] * len(gen.token_ids)
        traj.logprobs += gen.logprobs if gen.logprobs is not None else [0.0] * len(gen.token_ids)
        if gen.versions is not None and gen.kept_logmass is not None:
            traj.policy_versions += gen.versions
            traj.kept_logmass += gen.kept_logmass
        p.gen, p.cut = gen, gen.finish_reason == "length"
        return State.PARSE

    async def _parse(self, p: TokenProgress) -> State:
        traj, ids = p.traj, p.gen.token_ids
        text = p.text = self.tok.decode(ids[:-1] if ids and ids[-1] in self._eos else ids)
        if p.inline is not None:  # the turn an observation continued: one assistant message grows
            traj.messages.pop()
        if p.cut:
            p.calls = []
            traj.messages.append({"role": "assistant", "content": text if p.inline is None else p.inline + text})
            return State.INVOKE
        p.calls = await self.runtime.call_first("parse_tool_calls", traj.env, text=text, ctx=p.ctx) or []
        message = _assistant_message(text, p.calls, self.reasoning)
        if p.inline is not None:
            message["content"] = p.inline + text
        traj.messages.append(message)
        return State.INVOKE

    async def _invoke(self, p: TokenProgress) -> State:
        """INVOKE, and the observation's tokens: raw text that continues the turn, encoded on its own, or
        the token builder's rendering of the messages."""
        state = await super()._invoke(p)
        traj, ids = p.traj, p.gen.token_ids
        p.raw = _continuation_text(p.observation)
        if p.raw is not None:  # raw text in the same turn; a generated end-of-turn token goes
            p.drop, p.obs_ids = int(bool(ids) and ids[-1] in self._eos), self.tok.encode(p.raw)
        else:
            p.drop, p.obs_ids = self.seq.context_ids(
                traj.prompt_ids + traj.response_ids, traj.messages, traj.messages + p.observation, p.schemas
            )
        if p.drop > len(ids):
            raise RuntimeError(f"the token builder dropped {p.drop} tokens, more than the {len(ids)} just generated")
        p.observed = len(p.obs_ids) - p.drop
        return state

    async def _observe(self, p: TokenProgress) -> State:
        traj = p.traj
        if p.raw is not None:  # the model wrote plain text, no call record
            p.inline = (p.inline or "") + p.text + p.raw
            traj.messages[-1] = {"role": "assistant", "content": p.inline}
            p.continued = True
        else:
            traj.messages.extend(p.observation)
            p.inline = None
        kept = len(traj.response_ids) - p.drop
        del traj.response_ids[kept:], traj.response_mask[kept:], traj.logprobs[kept:]
        traj.response_ids += p.obs_ids
        traj.response_mask += [0] * len(p.obs_ids)
        traj.logprobs += [0.0] * len(p.obs_ids)
        if traj.policy_versions:
            del traj.policy_versions[kept:], traj.kept_logmass[kept:]
            traj.policy_versions += [-1] * len(p.obs_ids)
            traj.kept_logmass += [0.0] * len(p.obs_ids)
        return State.GENERATE

    def _ended(self, p: TokenProgress, sample: int | None) -> None:
        # Raw continuations are encoded piece by piece, not as a rendering of the messages.
        if p.traj.response_ids and not p.continued and self._checks_template(p.traj.id, sample):
            p.traj.template_mismatch = self.check_template(p.traj)

    def _checks_template(self, traj_id: str, sample: int | None) -> bool:
        return checks_template(self.cfg, traj_id, sample)

    def check_template(self, traj: Trajectory) -> str | None:
        """Where the incremental sequence departs from a full rendering of the messages, or None.

        Run once, when the trajectory ends: the loop only appends, so a turn that broke the prefix
        property still shows at its own token in the whole conversation, and the report names that
        turn. Equal sequences cost one rendering, one encoding and one list comparison."""
        schemas = [t.schema() for t in self.runtime.tools_for(traj.env).values()]
        # an episode the environment ended (stop reason done) ends with its observation, whose tokens
        # open the turn that was never generated
        ends_observed = traj.messages[-1].get("role") != "assistant"
        text = self.tok.render(traj.messages, schemas, add_generation_prompt=ends_observed)
        full = self.tok.encode(text)
        seq = traj.prompt_ids + traj.response_ids
        if full[: len(seq)] == seq:
            return None
        ends = len(full) < len(seq) and full == seq[: len(full)]
        i = len(full) if ends else next(k for k, (a, b) in enumerate(zip(seq, full)) if a != b)
        part = _part(traj, i)
        if ends:
            where = f"a full rendering ends at token {i}, the rollout at {len(seq)} (it goes on {part})"
        else:
            where = (
                f"token {i} ({part}): rollout has {self.tok.decode(seq[i : i + 12])!r}, "
                f"a full rendering has {self.tok.decode(full[i : i + 12])!r}"
            )
        decoded = self.tok.decode(seq)
        if same_text(decoded, text) and part.startswith("in assistant turn"):
            return f"{OWN_TOKENIZATION} (the text is the template's; tokens the model generated split it otherwise): {where}"
        if differs_in_reasoning_only(decoded, text):
            return (
                f"{REASONING_DROPPED} (the template leaves earlier <think> blocks out; the rollout keeps them): {where}"
            )
        return where


_frozen_lock = threading.Lock()
"""Runs may overlap, on one event loop or on several threads' loops: the count and the freeze change together."""
_runs_frozen = 0
_froze = False


@contextlib.contextmanager
def _older_objects_frozen() -> Iterator[None]:
    """While rollouts run, the objects made before them (the runtime, the model, every module) are
    left out of the garbage collector's full passes, which a rollout's many short-lived objects set
    off: one full pass took 28-39 ms of a 256-trajectory run's 310 ms of CPU in
    benchmarks/loop_scheduling.py, and a training process holds far more objects. They are handed
    back when the last run ends; a freeze someone else made is left alone."""
    global _runs_frozen, _froze  # noqa: PLW0603 - gc's freeze is process-wide, so its count is too
    with _frozen_lock:
        if _runs_frozen == 0:
            _froze = gc.isenabled() and gc.get_freeze_count() == 0
            if _froze:
                gc.freeze()
        _runs_frozen += 1
    try:
        yield
    finally:
        with _frozen_lock:
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
