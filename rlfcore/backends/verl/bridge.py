"""The ``rlf_agent`` agent loop: rlf's own loop inside verl's agent-loop workers.

verl builds one agent-loop object per sample and calls ``run``; this one rebuilds the rlf row, runs
:meth:`rlfcore.loop.Rollout.trajectory` (the code the local path runs) with verl's server client as
the engine and verl's continuous-token builder for the tokens between turns, and hands back
tokens, loss mask and logprobs, with the structured trace in ``extra_fields["rlf"]`` for the reward
function.
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import Any, Literal
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register
from verl.utils.tokenizer.continuous_token_wiring import (
    ContinuousTokenModelFamily,
    create_continuous_token_builder,
    get_continuous_token_builder_class,
)

from rlfcore.agents.rollout import AgentRollout
from rlfcore.backends.verl import AGENT_NAME
from rlfcore.backends.verl.convert import row_from_verl
from rlfcore.backends.verl.shared import rlf_settings, shared_runtime
from rlfcore.chat import HFChatTokenizer
from rlfcore.engines.base import Engine, Generation, SamplingParams
from rlfcore.loop import Rollout, Trajectory
from rlfcore.runtime import Runtime
from rlfcore.types import Message

TRACE_FIELDS = (
    "id",
    "row_id",
    "env",
    "messages",
    "num_turns",
    "tool_calls",
    "tool_errors",
    "tool_error_kinds",
    "tool_tracebacks",
    "stop_reason",
    "truncated",
    "error",
    "template_mismatch",
    "session_error",
    "generate_s",
    "tools_s",
    "ground_truth",
    "extra",
    "answer",
    "segment_reason",
)
"""The trajectory fields sent to the reward function; token lists stay in verl's tensors."""


SUMMED_FIELDS = ("spec_num_draft_tokens", "spec_num_accepted_tokens", "spec_num_verify_steps")
"""Per-generation counters of speculative decoding that add up over a trajectory's turns."""


class VerlServerEngine(Engine):
    """rlf's engine interface over verl's ``LLMServerClient``: token ids in, token ids and logprobs out.

    Temperature, top-p and top-k come from verl (greedy in validation); the per-turn token budget
    comes from the rlf loop. Logprobs are always requested, since verl trains on rollout logprobs.
    One engine serves one trajectory: ``extra_fields`` gathers what the server reported over its
    turns, as verl's own agent loops do (the first turn's fields, the latest ``max_global_steps``,
    speculative-decoding counters summed). verl's default trainer reads ``min_global_steps`` and
    ``max_global_steps`` (the weight versions a trajectory was sampled with) and fails without them.
    """

    def __init__(self, client: Any, sampling_params: dict[str, Any]):
        self.client = client
        self.sampling = {k: v for k, v in sampling_params.items() if k not in ("max_tokens", "max_new_tokens")}
        self.extra_fields: dict[str, Any] = {}

    def _record(self, fields: dict[str, Any]) -> None:
        if not self.extra_fields:
            self.extra_fields.update(fields)
            return
        if fields.get("max_global_steps") is not None:
            self.extra_fields["max_global_steps"] = fields["max_global_steps"]
        for key in SUMMED_FIELDS:
            if key in fields and key in self.extra_fields:
                self.extra_fields[key] = int(self.extra_fields[key]) + int(fields[key])

    async def generate(self, prompt_ids: list[int], params: SamplingParams, request_id: str = "") -> Generation:
        sampling = {**self.sampling, "max_tokens": params.max_tokens, "logprobs": True}
        if params.stop:  # vLLM's and SGLang's stop strings; the ids keep the token that completed one
            sampling.update(stop=list(params.stop), include_stop_str_in_output=True)
        out = await self.client.generate(request_id=request_id, prompt_ids=list(prompt_ids), sampling_params=sampling)
        self._record(dict(out.extra_fields or {}))
        tokens = list(out.token_ids)
        if out.log_probs is None or len(out.log_probs) != len(tokens):
            got = "none" if out.log_probs is None else len(out.log_probs)
            raise RuntimeError(
                f"verl's server returned {len(tokens)} tokens and {got} logprobs for request {request_id}"
            )
        stopped = bool(tokens) and (tokens[-1] in params.stop_token_ids)
        finish: Literal["stop", "length"] = "length" if len(tokens) >= params.max_tokens and not stopped else "stop"
        return Generation(token_ids=tokens, logprobs=[float(x) for x in out.log_probs], finish_reason=finish)


class ContinuousTokens:
    """The loop's token rules taken from verl's continuous-token builder (the one its own agent loops use).

    verl picks the builder by model family; it knows each family's turn boundaries (Qwen's newline
    after ``<|im_end|>``, tokens other families drop before a tool turn), so the rlf loop's sequences
    match what verl's trainer expects token for token. Tokens the builder inserts or appends get
    loss mask 0; dropped trailing tokens lose their mask and logprobs with them.
    """

    def __init__(self, builder: Any):
        self.builder = builder

    def prompt_ids(self, messages: list[Message], tools: list[dict[str, Any]] | None) -> list[int]:
        return list(self.builder.build_initial_tokens(messages, tools=tools or None))

    def context_ids(
        self, tokens: list[int], before: list[Message], after: list[Message], tools: list[dict[str, Any]] | None
    ) -> tuple[int, list[int]]:
        merged = self.builder.merge_context_tokens(before, after, tokens, tools=tools or None)
        drop = merged.removed_prefix_token_count
        if merged.token_ids[: len(tokens) - drop] != tokens[: len(tokens) - drop]:
            raise RuntimeError("verl's continuous-token builder changed tokens before the merge point")
        return drop, list(merged.token_ids[len(tokens) - drop :])


def chatml_aware(builder: Any, tokenizer: Any, chat_template_kwargs: dict[str, Any] | None = None) -> Any:
    """verl's builder, or Qwen's ChatML builder where verl fell back to its default for a ChatML template.

    verl picks the builder by ``config.json``'s ``model_type``; a ChatML model whose type verl does not
    know (SmolLM2 says ``llama``) gets the default builder, which drops ChatML's newline after a
    generated ``<|im_end|>``, so every tool turn's tokens would differ from the template's rendering.
    """
    default = get_continuous_token_builder_class(ContinuousTokenModelFamily.DEFAULT)
    if type(builder) is not default or "<|im_start|>" not in str(getattr(tokenizer, "chat_template", None) or ""):
        return builder
    return create_continuous_token_builder(
        tokenizer, model_family=ContinuousTokenModelFamily.QWEN, chat_template_kwargs=chat_template_kwargs or {}
    )


def trace_of(traj: Trajectory) -> dict[str, Any]:
    """What the reward function needs of a trajectory (messages, routing, counters, ground truth),
    with its token counts for rlf's per-sample records."""
    return {
        **{name: getattr(traj, name) for name in TRACE_FIELDS},
        "prompt_tokens": len(traj.prompt_ids),
        "response_tokens": len(traj.response_ids),
        "generated_tokens": sum(traj.response_mask),
    }


def trajectory_of(trace: dict[str, Any]) -> Trajectory:
    """The trajectory a trace describes (without tokens), for the reward pipeline."""
    names = {f.name for f in dataclasses.fields(Trajectory)}
    return Trajectory(**{k: v for k, v in trace.items() if k in names})


_AGENTS: weakref.WeakKeyDictionary[Runtime, AgentRollout] = weakref.WeakKeyDictionary()
"""One agent rollout (and endpoint) per runtime of a worker process: verl builds a loop per sample."""


def agent_rollout_of(runtime: Runtime, tokenizer: HFChatTokenizer, tokens: ContinuousTokens) -> AgentRollout:
    found = _AGENTS.get(runtime)
    if found is None:
        found = _AGENTS[runtime] = AgentRollout(runtime, None, tokenizer, tokens)
        found.seed = None  # verl seeds its servers
    return found


def _untrained(traj: Trajectory) -> list[str]:
    """Why each earlier segment of an agent episode began: verl 0.9.1's agent loop returns one token
    sequence per sample, so under verl an episode trains its last segment only."""
    return [str(s.get("reason")) for s in traj.segments]


@register(AGENT_NAME)
class RlfAgentLoop(AgentLoopBase):
    """Runs one rlf trajectory per verl sample with the run's enabled plugins."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        config_path, overrides = rlf_settings(self.config)
        runtime = await shared_runtime(config_path, overrides)
        tokenizer = HFChatTokenizer(self.tokenizer)
        engine = VerlServerEngine(self.server_manager, sampling_params)
        if getattr(self, "_rlf_builder", None) is None:
            self._rlf_builder = chatml_aware(
                self.continuous_token_builder, self.tokenizer, self.apply_chat_template_kwargs
            )
        row = row_from_verl(kwargs)
        traj_id = f"{row.id}#{uuid4().hex[:8]}"
        if runtime.config.agent is not None:  # the user's agent program, through rlf's endpoint
            agents = agent_rollout_of(runtime, tokenizer, ContinuousTokens(self._rlf_builder))
            async with agents.serving():
                traj = await agents.trajectory(row, traj_id, engine=engine)
        else:
            rollout = Rollout(runtime, engine, tokenizer, ContinuousTokens(self._rlf_builder))
            rollout.seed = None  # verl seeds its servers; per-request seeds would repeat across steps
            traj = await rollout.trajectory(row, traj_id)
        prompt_len, response_len = self.rollout_config.prompt_length, self.rollout_config.response_length
        if len(traj.prompt_ids) > prompt_len:
            raise ValueError(
                f"row {row.id!r}: the prompt has {len(traj.prompt_ids)} tokens, verl's prompt_length is {prompt_len}; "
                "raise rollout.max_total_tokens (verl's prompt_length is max_total_tokens - 1)"
            )
        return AgentLoopOutput(
            prompt_ids=traj.prompt_ids,
            response_ids=traj.response_ids[:response_len],
            response_mask=traj.response_mask[:response_len],
            response_logprobs=traj.logprobs[:response_len],
            num_turns=traj.num_turns,
            metrics=AgentLoopMetrics(generate_sequences=traj.generate_s, tool_calls=traj.tools_s),
            extra_fields={**engine.extra_fields, "rlf": {**trace_of(traj), "untrained_segments": _untrained(traj)}},
        )
