"""Rollouts of an agent program: per episode, a key on the endpoint, the agent's run, its exact tokens.

:class:`AgentRollout` is a drop-in for the token loop where ``rlf eval`` and the local trainer use
one (``run`` and ``group``, trajectories grouped by row): the agent decides the turns, the endpoint
records them (:mod:`rlfcore.agents.episode`), and a :class:`~rlfcore.loop.Trajectory` comes out, its
token fields the episode's last segment and its ``segments`` the others. The stop reason is the
episode's (a budget it ran into, ``max_requests``) or the agent's (``answer``, ``agent_error``,
``agent_timeout``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import zlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from rlfcore.agents.episode import Episode, Segment
from rlfcore.agents.gateway import Answer, ChatRequest, Choice, Gateway, RequestError
from rlfcore.agents.programs import runner
from rlfcore.chat import ChatTokenizer, reads_reasoning
from rlfcore.context import TurnContext
from rlfcore.data import Row
from rlfcore.engines.base import Engine, SamplingParams
from rlfcore.loop import Room, StopReason, Trajectory, _assistant_message, _older_objects_frozen, checks_template
from rlfcore.runtime import Runtime
from rlfcore.sequences import RolloutTokens, SequenceBuilder, TemplateError
from rlfcore.types import Message, ToolCall


def task_of(row: Row) -> dict[str, Any]:
    """What the agent is told about its row: its id, its prompt's messages and the last user text
    (never its ground truth)."""
    question = next((m.get("content") for m in reversed(row.prompt) if m.get("role") == "user"), "")
    return {"id": row.id, "messages": list(row.prompt), "question": question}


class EpisodeRun:
    """One episode's side of the endpoint: each request placed in its segments, generated, recorded."""

    def __init__(self, rollout: AgentRollout, traj: Trajectory, ctx: TurnContext, engine: Engine):
        self.rollout, self.traj, self.ctx, self.engine = rollout, traj, ctx, engine
        self.episode = Episode(rollout.seq)
        self.requests = 0
        self.ended: str | None = None
        self.stop: StopReason | None = None
        self.last: Segment | None = None
        self.closed = False
        """The agent's run is over and the trajectory takes the segments: an answer still being
        generated then (the agent was stopped while it waited) is dropped, not appended."""

    def end(self, reason: StopReason, error: str | None = None) -> None:
        if self.ended is None:
            self.ended, self.stop = reason, reason
            if error:
                self.traj.error = error

    def report(self, reward: float) -> None:
        self.traj.agent_reward = reward

    async def complete(self, request: ChatRequest) -> Answer:
        cfg = self.rollout.cfg
        if self.requests >= self.rollout.max_requests:
            self.end("max_requests")
            raise RequestError(429, f"this episode used its agent.max_requests ({self.requests})", "max_requests")
        self.requests += 1
        try:
            seg, context = self.episode.place(request.messages, request.tools)
        except TemplateError as exc:
            raise RequestError(
                400, f"the chat template cannot render these messages: {exc}", "template_error"
            ) from None
        # rollout.max_response_tokens bounds a segment's response and what the whole episode generates:
        # an agent that starts a fresh context for every request must not spend max_requests times it
        spent = self.episode.generated()
        response = min(cfg.max_response_tokens - len(seg.response_ids), cfg.max_response_tokens - spent)
        room = Room(response, cfg.max_total_tokens - len(context))
        if room.least <= 0:
            Episode.failed(seg)
            self.end(room.tighter)
            raise RequestError(
                400,
                f"this episode has no room left (rollout.{room.tighter}: {len(context)} tokens in this context, "
                f"{spent} generated in the episode)",
                "context_length_exceeded",
            )
        segments = [seg, *(self._fork(seg, k, request.n) for k in range(1, request.n))]
        t0 = time.perf_counter()
        try:
            if request.n == 1:  # most requests: no task and gathering future for one generation
                gens = [await self.engine.generate(context, self._params(request, room, 0), self._id(0))]
            else:
                gens = await asyncio.gather(
                    *(
                        self.engine.generate(context, self._params(request, room, k), self._id(k))
                        for k in range(request.n)
                    )
                )
        except Exception as exc:  # the policy failed: this episode ends, the step goes on
            for s in segments:
                Episode.failed(s)
            self.end("error", f"{type(exc).__name__}: {exc}")
            raise RequestError(500, f"the policy failed: {type(exc).__name__}: {exc}", "policy_error") from None
        finally:
            self.traj.generate_s += time.perf_counter() - t0
        if self.closed:
            raise RequestError(409, f"this episode has ended ({self.ended}): it takes no more answers", "episode_ended")
        choices = []
        for s, gen in zip(segments, gens):
            choices.append(await self._answered(s, gen.token_ids, gen.logprobs, gen.finish_reason, request))
        self.last = seg
        return Answer(choices, prompt_tokens=len(context))

    def _fork(self, seg: Segment, k: int, n: int) -> Segment:
        """Choice ``k`` of ``n`` continues ``seg``'s context as a segment of its own (the shared
        tokens are trained once, in ``seg``: here their mask is 0)."""
        fork = Segment(
            f"choice {k + 1} of {n}",
            list(seg.prompt_ids),
            list(seg.messages),
            seg.tools,
            list(seg.response_ids),
            [0] * len(seg.response_ids),
            [0.0] * len(seg.response_ids),
            busy=True,
        )
        self.episode.segments.append(fork)
        return fork

    def _id(self, k: int) -> str:
        return self.traj.id if k == 0 else f"{self.traj.id}~{k}"

    def _params(self, request: ChatRequest, room: Room, k: int) -> SamplingParams:
        cfg = self.rollout.cfg
        params = SamplingParams.from_config(cfg.sampling, self.rollout.tok.eos_token_ids)
        params.max_tokens = min(cfg.sampling.max_tokens, request.max_tokens or cfg.sampling.max_tokens, room.least)
        params.stop += request.stop
        seed = self.rollout.seed if request.seed is None else request.seed
        if seed is not None:
            params.seed = zlib.crc32(f"{seed}/{self.traj.id}/{self.requests}/{k}".encode())
        return params

    async def _answered(
        self, seg: Segment, ids: list[int], logprobs: list[float] | None, finish: str, request: ChatRequest
    ) -> Choice:
        eos = self.rollout.eos
        ended = bool(ids) and ids[-1] in eos
        text = self.rollout.tok.decode(ids[:-1] if ended else ids)
        calls: list[ToolCall] = []
        if request.parse_calls and finish != "length":
            self.ctx.turn = self.traj.num_turns
            found = await self.rollout.runtime.call_first("parse_tool_calls", self.traj.env, text=text, ctx=self.ctx)
            calls = [c for c in found or [] if not c.error]
        message: Message = _assistant_message(text, calls, self.rollout.reasoning)
        Episode.answered(seg, ids, logprobs, message, cut=not ended)
        self.traj.num_turns += 1
        self.traj.tool_calls += len(calls)
        reason = "length" if finish == "length" else "tool_calls" if calls else "stop"
        return Choice(str(message.get("content") or ""), calls, reason, len(ids))

    def finish(self, outcome_reason: StopReason, error: str | None, answer: str | None) -> None:
        """The trajectory's fields from the episode: its last segment, the others, how it ended."""
        traj = self.traj
        trained = [s for s in self.episode.segments if any(s.response_mask)]
        main = self.last if self.last in trained else (trained[-1] if trained else None)
        if main is not None:
            traj.prompt_ids, traj.response_ids = main.prompt_ids, main.response_ids
            traj.response_mask, traj.logprobs = main.response_mask, main.logprobs
            traj.messages, traj.segment_reason = main.messages, main.reason
            traj.segments = [s.record() for s in trained if s is not main]
        traj.answer = answer
        if self.stop is not None:
            traj.stop_reason = self.stop
            traj.truncated = self.stop in ("max_response_tokens", "max_total_tokens")
        else:
            traj.stop_reason = outcome_reason
            if error:
                traj.error = error
        if not traj.num_turns and traj.stop_reason == "answer":
            traj.stop_reason, traj.error = "agent_error", "the agent finished without asking the endpoint anything"


class AgentRollout:
    """Trajectories of ``agent``'s episodes over dataset rows, through rlf's endpoint."""

    def __init__(
        self, runtime: Runtime, engine: Engine | None, tokenizer: ChatTokenizer, tokens: RolloutTokens | None = None
    ):
        agent = runtime.config.agent
        if agent is None:
            raise ValueError("an agent rollout needs the config's agent section")
        self.runtime, self.engine, self.tok = runtime, engine, tokenizer
        self.cfg = runtime.config.rollout
        self.seq: RolloutTokens = tokens or SequenceBuilder(tokenizer)
        self.seed: int | None = self.cfg.sampling.seed
        """Base of the per-request sampling seeds; the trainer sets a new one each step."""
        self.eos = set(tokenizer.eos_token_ids)
        self.reasoning = reads_reasoning(tokenizer)
        self.max_requests = agent.max_requests
        self.gateway = Gateway(agent.host, agent.model)
        self._run_agent = runner(agent, runtime.config.base_dir)
        self._gate: asyncio.Semaphore | None = None
        self._users = 0
        self._serving: asyncio.Lock | None = None

    async def run(
        self,
        rows: list[Row],
        n: int | None = None,
        on_done: Callable[[Trajectory], None] | None = None,
        seed: int | None = None,
    ) -> list[Trajectory]:
        """``n`` episodes per row (default ``rollout.n``), grouped by row in row order; ``seed``
        replaces :attr:`seed` (agent episodes of two steps never run at once)."""
        if seed is not None:
            self.seed = seed
        with _older_objects_frozen():  # as rlf's own loop: no full collections over what existed before
            groups = await asyncio.gather(*(self.group(row, n, on_done) for row in rows))
        return [t for group in groups for t in group]

    async def group(
        self, row: Row, n: int | None = None, on_done: Callable[[Trajectory], None] | None = None
    ) -> list[Trajectory]:
        """The ``n`` episodes of one row, within ``rollout.concurrency``; the endpoint serves while any runs."""
        if self._gate is None:
            self._gate = asyncio.Semaphore(self.cfg.concurrency)
        gate = self._gate

        async def one(k: int) -> Trajectory:
            async with gate:
                traj = await self.trajectory(row, f"{row.id}#{k}", sample=k)
            if on_done is not None:
                on_done(traj)
            return traj

        async with self.serving():
            return list(await asyncio.gather(*(one(k) for k in range(n or self.cfg.n))))

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        """The endpoint listens while any caller is inside: started by the first, stopped by the last."""
        if self._serving is None:
            self._serving = asyncio.Lock()
        async with self._serving:
            if self._users == 0:
                await self.gateway.start()
            self._users += 1
        try:
            yield
        finally:
            async with self._serving:
                self._users -= 1
                if self._users == 0:
                    await self.gateway.stop()
                    await self._run_agent.aclose()

    async def trajectory(
        self, row: Row, traj_id: str, sample: int | None = None, engine: Engine | None = None
    ) -> Trajectory:
        """One episode of ``row``, inside :meth:`serving`; ``sample``: its place in its group, which with
        ``rollout.check_template`` decides whether its segments are compared with the
        template's rendering; ``engine``: the policy for this episode (default: the rollout's)."""
        env = self.runtime.env_of(row.raw or {"env": row.env, "id": row.id})
        traj = Trajectory(
            id=traj_id,
            row_id=row.id,
            env=env,
            messages=list(row.prompt),
            ground_truth=row.ground_truth,
            extra=row.extra,
        )
        ctx = TurnContext(
            sample_id=traj.id,
            env=env,
            turn=0,
            messages=traj.messages,
            tools={},
            parser=self.cfg.parser,
            settings=self.runtime.settings(env),
            config=self.runtime.config,
            row=row.raw,
            runtime=self.runtime,
        )
        policy = engine or self.engine
        if policy is None:
            raise ValueError("an agent episode needs an engine: this rollout was built without one")
        episode = EpisodeRun(self, traj, ctx, policy)
        key = self.gateway.add(episode)
        try:
            outcome = await self._run_agent(task_of(row), self.gateway.base_url, key)
        finally:
            episode.ended, episode.closed = episode.ended or "finished", True
            self.gateway.remove(key, episode.ended)
        episode.finish(outcome.stop_reason, outcome.error, outcome.answer)
        if checks_template(self.cfg, traj_id, sample):
            traj.template_mismatch = self.check_template(episode.episode.segments)
        return traj

    def check_template(self, segments: list[Segment]) -> str | None:
        """Where a segment's tokens depart from a full rendering of its messages, or None."""
        for k, seg in enumerate(segments):
            if not any(seg.response_mask) or seg.cut:
                continue
            full = self.tok.encode(self.tok.render(seg.messages, seg.tools, add_generation_prompt=False))
            ids = seg.ids
            if full[: len(ids)] != ids:
                i = next((j for j, (a, b) in enumerate(zip(ids, full)) if a != b), min(len(ids), len(full)))
                return (
                    f"segment {k} ({seg.reason}), token {i}: the episode has {self.tok.decode(ids[i : i + 12])!r}, "
                    f"a full rendering has {self.tok.decode(full[i : i + 12])!r}"
                )
        return None


def agent_rollout(runtime: Runtime, engine: Engine, tokenizer: ChatTokenizer) -> AgentRollout | None:
    """The agent rollout when the config names an agent, else None (rlf's own loop)."""
    return AgentRollout(runtime, engine, tokenizer) if runtime.config.agent is not None else None
