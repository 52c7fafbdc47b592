"""The run config's schema: the core's sections as pydantic models, and the error that lists a config's mistakes.

Plain types at the bottom of the import graph: the contexts, engines, executor and plugin machinery
name these classes; reading a config file and enabling its plugins is :mod:`rlfcore.config`'s job, a
layer above. Each enabled plugin's own section is validated against the schema it registers and
kept beside the core's (:meth:`RunConfig.settings`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from rlfcore.paths import config_dir, config_path, source_header

CHAT_ENGINES = ("openai-chat",)
"""Engines that send messages, not token ids: evaluation only, no local tokenizer needed."""

TRAINING_REFUSED = (
    "engine {name!r} talks to a chat-completions API, which returns text, not the token ids and logprobs "
    "training needs: it is for `rlf eval` only. Train with the transformers engine (the default) or "
    "`--backend verl`, and evaluate the result with engine.name: {name}"
)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")

    def changed(self) -> set[str]:
        """The fields given a value other than their default: the user's choices. Fields *set* cannot tell
        them apart once a run resumes, since its recorded ``config.yaml`` names every field."""
        fields = type(self).model_fields
        return {
            k for k in self.model_fields_set if getattr(self, k) != fields[k].get_default(call_default_factory=True)
        }


class ModelInit(_Section):
    texts: list[str] = Field(
        default_factory=list, description="JSONL files whose prompts, answers and messages train the tokenizer."
    )
    vocab_size: int = Field(512, ge=265)
    hidden_size: int = Field(64, ge=8)
    num_layers: int = Field(2, ge=1)
    num_heads: int = Field(4, ge=1)
    num_kv_heads: int = Field(2, ge=1)
    intermediate_size: int = Field(256, ge=8)
    template: Literal["qwen3", "compact"] = Field(
        "compact",
        description="Chat template: `compact` lists tools as one short line each (small models learn it faster).",
    )
    tokenizer: str | None = Field(
        None,
        description="A real tokenizer folder (e.g. Qwen3's): the model is sized to its vocabulary and uses its chat "
        "template; no tokenizer is trained.",
    )

    @model_validator(mode="after")
    def _one_tokenizer(self) -> ModelInit:
        trained = sorted({"texts", "vocab_size", "template"} & self.changed())
        if self.tokenizer is not None and trained:
            raise ValueError(
                f"{', '.join(trained)} {'is' if len(trained) == 1 else 'are'} for a tokenizer trained here, but "
                f"tokenizer {self.tokenizer!r} brings its own vocabulary and chat template: set one or the other"
            )
        return self


class ModelConfig(_Section):
    path: str | None = Field(
        None, description="Local folder of a Hugging Face model (weights, tokenizer, chat template)."
    )
    tokenizer: str | None = Field(None, description="Tokenizer folder, when it differs from `path`.")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto",
        description="Weights' dtype for the `transformers` engine and for local training; `auto` is float32 in both.",
    )
    init: ModelInit | None = Field(None, description="Build a tiny model at `path` when the folder does not exist.")
    chat_template_kwargs: dict[str, Any] = Field(
        default_factory=dict, description="Extra chat-template variables, e.g. `{enable_thinking: false}` for Qwen3."
    )


class DataConfig(_Section):
    train: str | None = Field(None, description="Training rows: JSONL or parquet.")
    eval: str | None = Field(None, description="Evaluation rows: JSONL or parquet.")
    default_env: str | None = Field(None, description="Environment of rows that name none.")
    difficulty: str | None = Field(
        None,
        description="A difficulty file from `rlf eval --repeats` (one line per row: id, solve_rate, ...): "
        "training rows are dropped by their solve rate (`drop_solved_at_least`, `drop_solved_at_most`).",
    )
    drop_solved_at_least: float | None = Field(
        None, ge=0, le=1, description="Drop training rows whose solve rate is at least this (1.0: always solved)."
    )
    drop_solved_at_most: float | None = Field(
        None, ge=0, le=1, description="Drop training rows whose solve rate is at most this (0.0: never solved)."
    )

    @model_validator(mode="after")
    def _difficulty_thresholds(self) -> DataConfig:
        thresholds = self.drop_solved_at_least is not None or self.drop_solved_at_most is not None
        if thresholds and not self.difficulty:
            raise ValueError(
                "drop_solved_at_least and drop_solved_at_most need data.difficulty, the file of solve rates"
            )
        if self.difficulty and not thresholds:
            raise ValueError("data.difficulty drops nothing without drop_solved_at_least or drop_solved_at_most")
        low, high = self.drop_solved_at_most, self.drop_solved_at_least
        if low is not None and high is not None and low >= high:
            raise ValueError(
                f"drop_solved_at_most ({low}) must be below drop_solved_at_least ({high}): it drops every row"
            )
        return self


class SamplingConfig(_Section):
    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(-1, description="-1: no top-k filtering.")
    max_tokens: int = Field(256, gt=0, description="Tokens generated per turn at most.")
    seed: int | None = None
    stop: list[str] = Field(
        default_factory=list,
        description="Stop strings: a turn ends once its generated text contains one (e.g. Search-R1's `</search>`).",
    )

    @field_validator("stop")
    @classmethod
    def _stop_not_empty(cls, stop: list[str]) -> list[str]:
        if any(not s for s in stop):
            raise ValueError("an empty stop string would stop every generation at once")
        return stop


class RolloutConfig(_Section):
    parser: str = Field("hermes", description="Tool-call format, by the name a plugin registered.")
    system_prompt: str | None = Field(None, description="Prepended to prompts that have no system message.")
    max_turns: int = Field(4, ge=1)
    max_response_tokens: int = Field(1024, gt=0, description="Generated plus observation tokens per trajectory.")
    max_total_tokens: int = Field(4096, gt=0, description="Prompt plus response tokens per trajectory.")
    n: int = Field(1, ge=1, description="Samples per prompt (GRPO's group size).")
    concurrency: int = Field(64, ge=1, description="Trajectories in flight at once.")
    check_template: bool | Literal["group"] = Field(
        "group",
        description="Compare incremental tokens with a full rendering: every trajectory (`true`), none (`false`), "
        "or one in each group of `rollout.n` (`group`).",
    )
    unreadable_calls: Literal["observe", "stop"] = Field(
        "observe",
        description="A call the parser cannot read: `observe` answers it with the error; `stop` ends the trajectory.",
    )
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)


class ToolsConfig(_Section):
    timeout_s: float = Field(30.0, gt=0, description="Per call, unless the tool sets its own.")
    max_concurrency: int = Field(64, ge=1, description="Calls in flight across all trajectories.")
    retries: int = Field(0, ge=0, description="Retries of calls that fail with a transient error.")
    cache: bool = Field(False, description="Reuse results of identical calls within a run.")
    cache_size: int = Field(
        4096, ge=1, description="Results the cache keeps, each as the model saw it; the least recently used go first."
    )
    max_output_chars: int = Field(4000, gt=0, description="Longer results are cut, with a note saying so.")
    session_timeout_s: float = Field(
        30.0, gt=0, description="Time limit of opening, and of releasing, one plugin's session of a trajectory."
    )
    shutdown_timeout_s: float = Field(
        60.0,
        gt=0,
        description="Time limit of each plugin's `shutdown`, of each of the two rounds of cancelling what still "
        "runs as the run's event loop closes, and of the wait for calls still in its default executor.",
    )


class EngineConfig(_Section):
    name: str = Field(
        "transformers", description="transformers, openai, openai-chat (evaluation only), or one a plugin registered."
    )
    base_url: str | None = Field(None, description="For `openai` and `openai-chat`: the server's URL, ending in /v1.")
    model: str | None = Field(None, description="For `openai` and `openai-chat`: the served model's name.")
    chat_tools: Literal["api", "text"] = Field(
        "api",
        description="For `openai-chat`: tool calls in the API's `tools` field (`api`), or as text in `rollout.parser`'s format (`text`).",
    )
    api_key: str | None = Field(
        None,
        description="For `openai` and `openai-chat`: the bearer key, in clear; never saved or printed "
        "(`api_key_env` keeps it out of the config).",
    )
    api_key_env: str | None = Field(
        None,
        min_length=1,
        description="For `openai` and `openai-chat`: the environment variable that holds the key, by name.",
    )
    timeout_s: float = Field(
        600.0,
        gt=0,
        description="For `openai` and `openai-chat`: seconds one generation may take in all, retries and their waits included.",
    )
    max_response_bytes: int = Field(
        64 * 2**20, ge=1024, description="For `openai` and `openai-chat`: the longest answer read, in bytes."
    )
    max_batch_size: int = Field(32, ge=1, description="For `transformers`: prompts generated together.")
    device: str = Field("auto", description="For `transformers`: cpu, cuda, or auto.")
    threads: int | None = Field(
        None, ge=1, description="For `transformers`: torch threads while generating; None: as for training."
    )

    @model_validator(mode="after")
    def _one_key(self) -> EngineConfig:
        if self.api_key is not None and self.api_key_env is not None:
            raise ValueError("set engine.api_key or engine.api_key_env (the variable that holds it), not both")
        return self

    def key(self) -> str | None:
        """The API key: ``api_key``, or the value of the variable ``api_key_env`` names, read when the
        engine starts so the key itself is in no config, run folder or log."""
        if self.api_key_env is None:
            return self.api_key
        value = os.environ.get(self.api_key_env)
        if not value:
            raise ValueError(f"engine.api_key_env {missing_key_env(self.api_key_env)}")
        return value


def missing_key_env(name: str) -> str:
    """Why ``engine.api_key_env`` gives no key, and what to do."""
    return f"names {name}, which is not set in the environment: export {name}=<key> first"


REDACTED = "<redacted>"
"""What a secret's value is shown, logged and saved as."""

_SECRET_WORDS = {"token", "secret", "password", "passwd", "authorization"}


def is_secret(name: str) -> bool:
    """Whether a setting named ``name`` holds a secret: ``*api_key*``, or a word ``token``, ``secret``,
    ``password`` or ``authorization`` in it (``hf_token``, ``X-Auth-Token``; not ``max_tokens``). A name
    ending in ``_env`` names an environment variable, which is no secret."""
    low = name.lower().replace("-", "_")
    if low.endswith("_env"):
        return False
    return "api_key" in low or "apikey" in low or bool(_SECRET_WORDS & set(re.split(r"[^a-z0-9]+", low)))


def redacted(value: Any) -> Any:
    """``value`` (a resolved config, or part of one) with every non-empty string under a secret's name
    replaced by :data:`REDACTED`."""
    if isinstance(value, dict):
        return {
            k: REDACTED if is_secret(str(k)) and isinstance(v, str) and v else redacted(v) for k, v in value.items()
        }
    if isinstance(value, list):
        return [redacted(v) for v in value]
    return value


class RewardConfig(_Section):
    weights: dict[str, float] = Field(
        default_factory=dict, description="Weights of score components and `judge`; empty: the score alone."
    )
    timeout_s: float = Field(60.0, gt=0, description="Per sample and scorer.")
    processes: int = Field(
        0, ge=0, description="Worker processes for CPU-heavy scorers (`ctx.in_process`); 0: up to 4, one per CPU."
    )


class SFTConfig(_Section):
    data: str | None = Field(
        None, description="JSONL of conversations (`messages`); `rlf train` runs SFT first when set."
    )
    tools: str | None = Field(
        None,
        description="JSON file of OpenAI tool schemas for conversations that carry no `tools` of their own "
        "(an agent's tools, which no plugin registers); default: the environment's tools.",
    )
    steps: int = Field(0, ge=0)
    lr: float = Field(1e-3, gt=0)
    batch_size: int = Field(16, ge=1)
    lr_schedule: Literal["constant", "linear", "cosine"] = "constant"
    warmup_steps: int = Field(0, ge=0)


LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
"""The attention and MLP projections of Llama, Qwen2 and Qwen3 models."""


class LoraConfig(_Section):
    rank: int = Field(16, ge=1, description="r: the rank of each adapter.")
    alpha: int = Field(32, ge=1, description="lora_alpha: updates are scaled by alpha / rank.")
    dropout: float = Field(0.0, ge=0, lt=1, description="Dropout on the adapters' inputs while training.")
    target_modules: list[str] = Field(
        default_factory=lambda: list(LORA_TARGETS), min_length=1, description="Names of the layers that get adapters."
    )


class TrainerConfig(_Section):
    steps: int = Field(100, ge=0, description="GRPO steps.")
    prompts_per_step: int = Field(8, ge=1, description="Dataset rows per step; each gets rollout.n samples.")
    lr: float = Field(1e-4, gt=0)
    lr_schedule: Literal["constant", "linear", "cosine"] = "constant"
    warmup_steps: int = Field(0, ge=0)
    weight_decay: float = Field(0.0, ge=0)
    max_grad_norm: float = Field(1.0, gt=0)
    clip_ratio: float = Field(0.2, gt=0, description="PPO clip range below 1.")
    clip_ratio_high: float | None = Field(None, gt=0, description="PPO clip range above 1 (default: clip_ratio).")
    epochs_per_step: int = Field(1, ge=1, description="Passes over each step's batch.")
    micro_batch_size: int = Field(16, ge=1, description="Sequences per forward pass; gradients accumulate.")
    micro_batch_tokens: int | None = Field(
        None, ge=1, description="Padded tokens per forward pass at most (sequences sorted by length); None: no limit."
    )
    kl_coef: float = Field(0.0, ge=0, description="Weight of the KL penalty to the frozen initial model.")
    lora: LoraConfig | None = Field(
        None, description="Train LoRA adapters (peft) on frozen weights, for SFT and GRPO; null: full fine-tuning."
    )
    loss_agg: Literal["token-mean", "seq-mean"] = "token-mean"
    std_normalize: bool = Field(True, description="Divide advantages by the group's std (false: Dr. GRPO).")
    turn_advantage: Literal["outcome", "return_to_go"] = Field(
        "outcome",
        description="outcome: one advantage per sample from its reward; return_to_go: each assistant turn's "
        "tokens get the group-normalised reward earned from that turn on (the same as outcome without per-turn rewards).",
    )
    bf16: bool = Field(True, description="bf16 autocast where the hardware has it (CUDA).")
    device: str = Field("auto", description="cpu, cuda, or auto.")
    checkpoint_every: int = Field(50, ge=1)
    samples_per_step: int = Field(4, ge=0, description="Trajectories saved per step in samples/.")
    resample_zero_variance: int = Field(
        0,
        ge=0,
        description="Dynamic sampling (DAPO): up to this many fresh prompts per step replace groups whose rewards "
        "are all equal; 0: off.",
    )
    max_staleness: int = Field(
        0,
        ge=0,
        description="Asynchronous GRPO (local backend): rollouts of up to this many later steps run while a step "
        "updates, and no step trains on tokens sampled more than this many updates ago; 0: synchronous.",
    )
    importance_correction: Literal["tis", "mis"] = Field(
        "tis",
        description="With max_staleness >= 1, how tokens sampled by an older policy are weighed: tis truncates the "
        "importance weight at importance_bound; mis drops tokens whose weight lies outside [1/bound, bound].",
    )
    importance_bound: float = Field(2.0, gt=1, description="The importance weights' bound (TIS, MIS).")
    loggers: list[Literal["tensorboard", "wandb", "mlflow", "trackio"]] = Field(
        default_factory=list,
        description="Experiment trackers fed every step's metrics, besides metrics.jsonl (each must be installed).",
    )
    project: str = Field(
        "rlf", min_length=1, description="Project (W&B, Trackio) or experiment (MLflow) of the trackers' runs."
    )


class AgentConfig(_Section):
    """An agent program rlf trains through its OpenAI-compatible endpoint (docs/agents.md)."""

    entry: str | None = Field(
        None,
        description="`module:function` or `file.py:function` (relative to the config), an "
        "`async def run(task, client)` that returns its answer (a str, or None)",
    )
    command: list[str] | None = Field(
        None,
        description="Or a program run per episode (in the config's folder), with `OPENAI_BASE_URL`, "
        "`OPENAI_API_KEY` and `RLF_TASK` (the task as JSON) set; its stdout is its answer.",
    )
    model: str = Field(
        "policy", min_length=1, description="The model name the agent is given; a request for any other gets a 404."
    )
    timeout_s: float = Field(
        300.0,
        gt=0,
        description="Per episode: past it the agent is stopped (a program is killed with its process group)",
    )
    max_requests: int = Field(32, ge=1, description="Chat completions per episode.")
    host: str = Field("127.0.0.1", description="Where the endpoint listens: loopback unless agents run elsewhere.")

    @model_validator(mode="after")
    def _one_way(self) -> AgentConfig:
        if (self.entry is None) == (self.command is None):
            raise ValueError("set exactly one of agent.entry (a Python function) and agent.command (a program)")
        if self.entry is not None and ":" not in self.entry:
            raise ValueError(f"agent.entry {self.entry!r} is not `module:function`")
        if self.command is not None and not self.command:
            raise ValueError("agent.command is empty")
        return self


class RunConfig(_Section):
    """A run's settings. Plugin sections are kept apart, validated by each plugin's schema."""

    plugins: list[str] = Field(default_factory=list, description="Installed plugins to enable, by name.")
    local_plugins: list[str] = Field(
        default_factory=list,
        description="Plugins from `module`, `module:attr` or a `.py` path (relative to the config).",
    )
    envs: dict[str, list[str]] = Field(
        default_factory=dict, description="Environments by name, each the plugins it uses; default: one per plugin."
    )
    seed: int = 0
    model: ModelConfig = Field(default_factory=ModelConfig)
    sft: SFTConfig = Field(default_factory=SFTConfig)
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    tools: ToolsConfig = Field(default_factory=ToolsConfig)
    engine: EngineConfig = Field(default_factory=EngineConfig)
    reward: RewardConfig = Field(default_factory=RewardConfig)
    agent: AgentConfig | None = Field(
        None, description="Roll out an agent program through rlf's endpoint instead of rlf's own tool loop."
    )

    _settings: dict[str, BaseModel | None] = PrivateAttr(default_factory=dict)
    _source: Path | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _agent_outcome(self) -> RunConfig:
        if self.agent is not None and self.trainer.turn_advantage != "outcome":
            raise ValueError(
                "trainer.turn_advantage: return_to_go needs rlf's own loop's turns; an agent's episodes "
                "train with outcome advantages (set trainer.turn_advantage: outcome, or drop agent)"
            )
        return self

    @model_validator(mode="after")
    def _asynchronous(self) -> RunConfig:
        if not self.trainer.max_staleness:
            return self
        if self.agent is not None:
            raise ValueError(
                "trainer.max_staleness: asynchronous GRPO runs rlf's own loop, not an agent program's episodes "
                "(set trainer.max_staleness: 0, or drop agent)"
            )
        if self.trainer.resample_zero_variance:
            raise ValueError(
                "trainer.resample_zero_variance: dynamic sampling draws rows that a later step, rolling out at the "
                "same time, may hold; with trainer.max_staleness set it to 0"
            )
        return self

    def settings(self, plugin: str) -> BaseModel | None:
        """The validated section of one plugin (``None`` when it registers no schema).

        Read from pydantic's store of private values: ``self._settings`` goes through pydantic's
        ``__getattr__``, which raises and catches an AttributeError on every read (1.8 µs, and the
        loop asks on every hook call)."""
        private = self.__pydantic_private__ or {}
        settings: dict[str, BaseModel | None] = private.get("_settings") or {}
        return settings.get(plugin)

    @property
    def source(self) -> Path | None:
        """The YAML file this config was read from."""
        return self._source

    @property
    def base_dir(self) -> Path:
        """The folder relative paths in this config are read from: the config file's (else the current one)."""
        return config_dir(self)

    def path(self, value: str | Path) -> Path:
        """A path from this config, the one rule of every command: relative to the config file's folder."""
        return config_path(self, value)

    def environments(self) -> dict[str, list[str]]:
        """Each environment and its plugins: as configured, or one environment per enabled plugin."""
        if self.envs:
            return {k: list(v) for k, v in self.envs.items()}
        return {name: [name] for name in [*self.plugins, *self._local_names()]}

    def _local_names(self) -> list[str]:
        return [n for n in self._settings if n not in self.plugins]

    def resolved(self) -> dict[str, Any]:
        """Everything this run uses, defaults filled in, secrets :func:`redacted`: what is saved beside
        every run, printed by ``rlf config`` and sent to trackers."""
        out = self.model_dump(mode="json")
        for name, section in self._settings.items():
            if section is not None:
                out[name] = section.model_dump(mode="json")
        resolved: dict[str, Any] = redacted(out)
        return resolved

    def save(self, path: str | Path) -> None:
        """Write :meth:`resolved` to ``path``, headed by the config file it came from (when it has one), so
        the copy reads its relative paths as the original did (:func:`rlfcore.paths.recorded_source`)."""
        header = source_header(self.source) if self.source else ""
        Path(path).write_text(header + yaml.safe_dump(self.resolved(), sort_keys=False))


class ConfigIssue(BaseModel):
    path: str
    message: str


class ConfigError(Exception):
    """All the mistakes of one config, each with its dotted path."""

    def __init__(self, issues: list[ConfigIssue], source: str = "config"):
        self.issues = issues
        self.source = source
        super().__init__(self.render())

    def render(self) -> str:
        n = len(self.issues)
        lines = [f"{self.source}: {n} error{'s' if n != 1 else ''}"]
        lines += [f"  {i.path or '(top level)'}: {i.message}" for i in self.issues]
        return "\n".join(lines)
