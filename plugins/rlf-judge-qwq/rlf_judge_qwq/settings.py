"""The ``judge-qwq:`` section of a run config. Every field has a default: with none set, the plugin
loads and judges nothing (it has no endpoint to ask)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

DEFAULT_RUBRIC = (
    "Grade how correct and complete the response is as an answer to the question. When a reference "
    "answer is given, a response that reaches the same final answer is correct even if it is worded "
    "differently, and a response that contradicts it is wrong. Ignore length and style unless they hide "
    "the answer."
)


class JudgeSettings(BaseModel):
    """How to reach the judge, what to ask it, and how to turn its verdict into a reward."""

    model_config = ConfigDict(extra="forbid")

    backend: Literal["openai", "transformers"] = Field(
        "openai", description="`openai`: chat endpoints (vLLM, verl's reward router); `transformers`: in-process model."
    )
    endpoints: list[str] = Field(
        default_factory=list,
        description="Base URLs ending in /v1, balanced over. Empty: the judge the trainer serves (verl's reward router), else none.",
    )
    model: str = Field("Qwen/QwQ-32B", description="The served model name sent in each request.")
    api_key: str | None = Field(None, description="Sent as a bearer token when set.")
    model_path: str | None = Field(None, description="For `transformers`: the model folder (relative to the config).")
    device: str = Field("cpu", description="For `transformers`: cpu or cuda.")

    mode: Literal["pointwise", "group"] = Field(
        "pointwise", description="`pointwise`: one request per sample; `group`: one request grades the whole group."
    )
    envs: list[str] = Field(default_factory=list, description="Environments to judge; empty: all.")
    rubric: str = Field(DEFAULT_RUBRIC, description="What the judge grades, in its own words.")
    strip_reasoning: bool = Field(True, description="Drop the policy's <think>...</think> before judging.")
    max_response_chars: int = Field(16000, gt=0, description="Longer responses are cut, with a note saying so.")

    score_min: int = Field(0, description="Lowest verdict the judge may give.")
    score_max: int = Field(10, description="Highest verdict the judge may give.")
    reward_min: float = Field(0.0, description="Reward of the lowest verdict.")
    reward_max: float = Field(1.0, description="Reward of the highest verdict.")
    group_reward: Literal["scale", "rank"] = Field(
        "scale", description="In group mode: map each verdict linearly (`scale`) or by its rank in the group (`rank`)."
    )

    temperature: float = Field(0.6, ge=0, description="QwQ's recommended sampling; greedy decoding may loop.")
    top_p: float = Field(0.95, gt=0, le=1)
    max_tokens: int = Field(8192, gt=0, description="Judge tokens per request, reasoning included.")
    seed: int | None = Field(None, description="Sent as `seed` (plus the attempt number on retries).")
    extra_body: dict[str, Any] = Field(default_factory=dict, description="Merged into every request body.")

    concurrency: int = Field(32, ge=1, description="Judge requests in flight at once, over all endpoints.")
    balance: Literal["least_in_flight", "round_robin"] = "least_in_flight"
    timeout_s: float = Field(300.0, gt=0, description="Per request, waiting for the whole answer.")
    connect_timeout_s: float = Field(10.0, gt=0)
    retries: int = Field(3, ge=0, description="Retries of failed requests (connection, timeout, 408, 429, 5xx).")
    backoff_s: float = Field(0.5, ge=0, description="First retry delay; doubled each retry, with jitter.")
    backoff_max_s: float = Field(10.0, ge=0)
    parse_retries: int = Field(2, ge=0, description="New requests after an unreadable verdict, before giving up.")
    cache_size: int = Field(4096, ge=0, description="Verdicts of identical requests kept; 0 turns the cache off.")

    @model_validator(mode="after")
    def _check_ranges(self) -> JudgeSettings:
        if self.score_min >= self.score_max:
            raise ValueError(f"score_min ({self.score_min}) must be below score_max ({self.score_max})")
        if self.backend == "transformers" and not self.model_path:
            raise ValueError("backend 'transformers' needs model_path: the folder of the judge model")
        bad = [u for u in self.endpoints if not u.startswith(("http://", "https://"))]
        if bad:
            raise ValueError(f"endpoints must be http(s) URLs ending in /v1, got {bad}")
        return self
