"""The run config: one YAML file, validated into typed models before anything heavy starts.

Core settings live in the models below. Each enabled plugin owns the top-level section named after
it, validated against the schema it registered. Every mistake is reported at once with its dotted
path, the bad value and what was expected.
"""

from __future__ import annotations

import difflib
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from rlfcore.paths import config_dir, config_path

if TYPE_CHECKING:
    from rlfcore.plugins import PluginManager


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


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
        trained = sorted({"texts", "vocab_size", "template"} & self.model_fields_set)
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
        description="Time limit of each plugin's async `shutdown`, and of each of the two rounds of cancelling "
        "what still runs as the run's event loop closes.",
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
    api_key: str | None = None
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
    loggers: list[Literal["tensorboard", "wandb", "mlflow", "trackio"]] = Field(
        default_factory=list,
        description="Experiment trackers fed every step's metrics, besides metrics.jsonl (each must be installed).",
    )
    project: str = Field(
        "rlf", min_length=1, description="Project (W&B, Trackio) or experiment (MLflow) of the trackers' runs."
    )


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

    _settings: dict[str, BaseModel | None] = PrivateAttr(default_factory=dict)
    _source: Path | None = PrivateAttr(default=None)

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
        """Everything this run uses, defaults filled in: what is saved beside every run."""
        out = self.model_dump(mode="json")
        for name, section in self._settings.items():
            if section is not None:
                out[name] = section.model_dump(mode="json")
        return out

    def save(self, path: str | Path) -> None:
        Path(path).write_text(yaml.safe_dump(self.resolved(), sort_keys=False))


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


# --- reading ---------------------------------------------------------------------------------------


def read_yaml(path: str | Path) -> dict[str, Any]:
    """Read one YAML mapping, turning every failure into a ConfigError that names the file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError([ConfigIssue(path="", message=f"no such file: {path}")], source=str(path))
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError([ConfigIssue(path="", message=f"{where}{problem}")], source=str(path)) from None
    if not isinstance(data, dict):
        raise ConfigError(
            [ConfigIssue(path="", message=f"expected a mapping of settings, got {type(data).__name__}")],
            source=str(path),
        )
    return data


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> list[ConfigIssue]:
    """Apply ``dotted.key=value`` overrides in place; values are read as YAML (``3``, ``true``, ``[a, b]``)."""
    issues = []
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            issues.append(ConfigIssue(path=item, message="an override must look like dotted.key=value"))
            continue
        parts = key.strip().split(".")
        node = data
        for i, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                issues.append(
                    ConfigIssue(path=".".join(parts[: i + 1]), message=f"is {child!r}, not a section; cannot set {key}")
                )
                break
            node = child
        else:
            try:
                node[parts[-1]] = yaml.safe_load(raw) if raw.strip() else ""
            except yaml.YAMLError:
                node[parts[-1]] = raw
    return issues


def _loc_path(prefix: str, loc: tuple[Any, ...]) -> str:
    parts = [prefix] if prefix else []
    for p in loc:
        parts.append(f"[{p}]" if isinstance(p, int) else str(p))
    return ".".join(parts).replace(".[", "[")


def _model_at(model: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The section model at a location, looking through ``X | None``."""
    for part in loc:
        field = model.model_fields.get(str(part))
        ann = getattr(field, "annotation", None)
        found = [a for a in (ann, *typing.get_args(ann)) if isinstance(a, type) and issubclass(a, BaseModel)]
        if not found:
            return None
        model = found[0]
    return model


def _issues_from(exc: ValidationError, model: type[BaseModel], prefix: str = "") -> list[ConfigIssue]:
    issues = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        path = _loc_path(prefix, loc)
        if err["type"] == "extra_forbidden":
            parent = _model_at(model, loc[:-1])
            known = list(parent.model_fields) if parent else []
            hint = difflib.get_close_matches(str(loc[-1]), known, n=1)
            msg = f"unknown key (value {err['input']!r})"
            msg += (
                f"; did you mean '{hint[0]}'?" if hint else (f"; expected one of: {', '.join(known)}" if known else "")
            )
        elif err["type"] == "missing":
            msg = "required, but missing"
        else:
            msg = f"{err['msg']} (got {err['input']!r})"
        issues.append(ConfigIssue(path=path, message=msg))
    return issues


def load_config(
    source: str | Path | dict[str, Any],
    overrides: list[str] | None = None,
    manager: PluginManager | None = None,
) -> tuple[RunConfig, PluginManager]:
    """Read, override, enable plugins and validate: a RunConfig and the manager with its plugins loaded.

    Raises ConfigError with every mistake found, or PluginError when an enabled plugin fails to load.
    """
    from rlfcore.plugins import PluginError, PluginManager

    if isinstance(source, dict):
        data, label, base = dict(source), "config", Path.cwd()
    else:
        data, label, base = read_yaml(source), str(source), config_dir(source)
    issues = apply_overrides(data, overrides or [])

    manager = manager or PluginManager()
    if not manager.infos:
        manager.discover()

    names = data.get("plugins", [])
    locals_ = data.get("local_plugins", [])
    wanted: list[str] = []
    if isinstance(names, list):
        for i, name in enumerate(names):
            if isinstance(name, str) and name not in manager.infos:
                installed = sorted(n for n, inf in manager.infos.items() if inf.source != "builtin")
                close = difflib.get_close_matches(name, installed, n=1)
                hint = f"did you mean '{close[0]}'? " if close else ""
                issues.append(
                    ConfigIssue(
                        path=f"plugins[{i}]",
                        message=f"no plugin named {name!r} is installed; {hint}installed: {', '.join(installed) or 'none'}",
                    )
                )
            elif isinstance(name, str):
                wanted.append(name)
    local_names: list[str] = []
    if isinstance(locals_, list):
        for i, spec in enumerate(locals_):
            if isinstance(spec, str):
                try:
                    local_names.append(manager.add_local(spec, base))
                except PluginError as exc:
                    issues.append(ConfigIssue(path=f"local_plugins[{i}]", message=str(exc)))
    manager.enable([*wanted, *local_names])

    # Each enabled plugin's section, validated against the schema it registered.
    settings: dict[str, BaseModel | None] = {}
    for name in [*wanted, *local_names]:
        schema = _schema_of(manager, name)
        section = data.pop(name, None)
        if schema is None:
            settings[name] = None
            if section is not None:
                issues.append(ConfigIssue(path=name, message=f"plugin '{name}' takes no settings (got {section!r})"))
            continue
        if section is not None and not isinstance(section, dict):
            issues.append(ConfigIssue(path=name, message=f"expected a mapping of settings, got {section!r}"))
            section = {}
        try:
            settings[name] = schema.model_validate(section or {})
        except ValidationError as exc:
            issues += _issues_from(exc, schema, prefix=name)
    for key in list(data):
        info = manager.infos.get(key)
        if key not in RunConfig.model_fields and info is not None and not info.enabled:
            issues.append(
                ConfigIssue(path=key, message=f"settings for plugin '{key}', which is not enabled: add it to `plugins`")
            )
            data.pop(key)

    config: RunConfig | None = None
    try:
        config = RunConfig.model_validate(data)
    except ValidationError as exc:
        core_issues = _issues_from(exc, RunConfig)
        for issue in core_issues:
            if issue.message.startswith("unknown key") and "." not in issue.path:
                issue.message = (
                    "unknown key: neither a core setting nor an enabled plugin's section"
                    + (issue.message[len("unknown key") :])
                )
        issues += core_issues
    if config is not None:
        config._settings = settings
        config._source = None if isinstance(source, dict) else Path(source)
        issues += _check_envs(config, manager)
        issues += _check_loggers(config)
    if issues:
        raise ConfigError(issues, source=label)
    assert config is not None
    return config, manager


def missing_files(config: RunConfig) -> list[ConfigIssue]:
    """The data files a config names that do not exist (each read relative to the config's folder)."""
    named = [("data.train", config.data.train), ("data.eval", config.data.eval), ("sft.data", config.sft.data)]
    if config.model.init is not None and not config.path(config.model.path or ".").joinpath("config.json").exists():
        named += [(f"model.init.texts[{i}]", t) for i, t in enumerate(config.model.init.texts)]
    issues = []
    for key, value in named:
        if value and not config.path(value).exists():
            issues.append(
                ConfigIssue(
                    path=key, message=f"no such file: {config.path(value)} (read relative to the config's folder)"
                )
            )
    return issues


def _schema_of(manager: PluginManager, name: str) -> type[BaseModel] | None:
    from rlfcore.hookcall import call_impl_sync

    for impl in manager.impls("register_config_schema", [name]):
        if impl.plugin_name == name:
            return call_impl_sync(manager, "register_config_schema", impl)
    return None


def _check_loggers(config: RunConfig) -> list[ConfigIssue]:
    """A tracker named in ``trainer.loggers`` whose package is not installed, found before a run starts."""
    from rlfcore.trackers import missing_tracker

    found = ((i, missing_tracker(name)) for i, name in enumerate(config.trainer.loggers))
    return [ConfigIssue(path=f"trainer.loggers[{i}]", message=problem) for i, problem in found if problem]


def _check_envs(config: RunConfig, manager: PluginManager) -> list[ConfigIssue]:
    issues = []
    for env, plugins in config.envs.items():
        for i, name in enumerate(plugins):
            if not manager.infos.get(name) or not manager.infos[name].enabled:
                issues.append(ConfigIssue(path=f"envs.{env}[{i}]", message=f"plugin {name!r} is not enabled"))
    default_env = config.data.default_env
    if default_env is not None and default_env not in config.environments():
        known = ", ".join(config.environments()) or "none"
        issues.append(
            ConfigIssue(path="data.default_env", message=f"unknown environment {default_env!r}; known: {known}")
        )
    return issues
