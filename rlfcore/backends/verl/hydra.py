"""The rlf config as verl Hydra overrides, composed and checked by verl's own config code.

Only settings with a meaning in both are translated; everything else keeps verl's default and can be
set with raw overrides, which come last and so win. The rlf config path and its overrides ride along
in verl's config (``rlf.*`` and the reward function's kwargs), because Ray workers read nothing else.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlfcore.backends.verl import AGENT_NAME, METRICS_FILE, REWARD_MANAGER

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from rlfcore.schema import RunConfig


class TranslationError(ValueError):
    """An rlf setting that verl cannot express, or a verl config that verl's validation rejects."""


METRICS_ENV = "VERL_FILE_LOGGER_PATH"
"""The variable verl's FileLogger takes its path from, set for verl's Ray workers."""


@dataclass
class Cluster:
    """Where verl runs: GPUs per node, nodes, the rollout engine and an existing Ray cluster, if any."""

    gpus_per_node: int = 1
    nodes: int = 1
    rollout: str = "vllm"
    ray_address: str | None = None
    tensor_parallel: int = 1
    gpu_memory_utilization: float = 0.5
    env_vars: dict[str, str] = field(default_factory=dict)


_PLAIN = re.compile(r"[A-Za-z_/.~][\w./~+-]*")
_RESERVED = {"true", "false", "null", "none", "inf", "nan"}


def hydra_value(value: Any) -> str:
    """A Python value in Hydra's override grammar; strings are quoted when they need it (spaces, ``=``, quotes)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    text = str(value)
    if _PLAIN.fullmatch(text) and text.lower() not in _RESERVED:
        return text
    # Hydra unescapes only backslashes that precede a quote or end the string, then \' itself
    text = re.sub(r"(\\+)(?='|$)", lambda m: m.group(1) * 2, text).replace("'", "\\'")
    return f"'{text}'"


def _model_path(config: RunConfig) -> str:
    if not config.model.path:
        raise TranslationError("model.path: the verl backend needs a model folder (or hub name) to train")
    path = Path(config.model.path).expanduser()
    if not path.is_absolute() and (config.base_dir / path).exists():
        path = config.base_dir / path
    elif not path.is_absolute() and config.model.init is not None:
        path = config.base_dir / path  # built there by model.init before verl starts
    return str(path.resolve()) if path.exists() or config.model.init is not None else config.model.path


def refusals(config: RunConfig) -> list[str]:  # noqa: PLR0912 - one independent check per setting verl cannot honour
    """The settings of ``config`` that verl cannot honour, each with what to change it to.

    Only values the user set are checked, so a default never stops a run.
    """
    t, r, e = config.trainer, config.rollout, config.engine
    out = []
    if t.lr_schedule == "linear":
        out.append(
            "trainer.lr_schedule: verl has constant and cosine schedules, not 'linear'; set it to constant or cosine"
        )
    if t.turn_advantage == "return_to_go":
        out.append(
            "trainer.turn_advantage: verl's GRPO gives every token of a sample one advantage, so per-turn "
            "rewards cannot reach it as return_to_go; set trainer.turn_advantage=outcome (each sample is then "
            "trained on its total reward, turn rewards included)"
        )
    if t.device == "cpu":
        out.append("trainer.device: verl places the model on the GPUs it is given (--gpus); remove trainer.device=cpu")
    if t.resample_zero_variance:
        out.append(
            "trainer.resample_zero_variance: the local trainer's dynamic sampling; verl has its own "
            "(algorithm.filter_groups in its DAPO recipe): set trainer.resample_zero_variance=0 for the verl backend"
        )
    if t.max_staleness > 1:
        out.append(
            f"trainer.max_staleness ({t.max_staleness}): rlf drives verl's one-step-off trainer (1), not its "
            "fully-async one; set trainer.max_staleness to 0 or 1 for the verl backend"
        )
    if t.max_staleness and t.importance_correction == "mis":
        out.append(
            "trainer.importance_correction: verl's rollout correction truncates the importance weight "
            "(algorithm.rollout_correction.rollout_is); set trainer.importance_correction=tis for the verl backend"
        )
    if t.lora is not None and t.lora.dropout:
        out.append("trainer.lora.dropout: verl's LoRA has no dropout setting; set trainer.lora.dropout=0")
    if t.micro_batch_tokens is not None and t.micro_batch_tokens < r.max_total_tokens:
        out.append(
            f"trainer.micro_batch_tokens ({t.micro_batch_tokens}): verl packs whole sequences into a micro-batch, "
            f"so it must hold the longest one; set it to at least rollout.max_total_tokens ({r.max_total_tokens})"
        )
    if r.max_total_tokens <= 1:  # a prompt and a response need a token each
        out.append(
            f"rollout.max_total_tokens ({r.max_total_tokens}): leaves no room for a prompt and a response; set it to 2 or more"
        )
    if r.sampling.seed is not None:
        out.append(
            "rollout.sampling.seed: verl seeds its rollout servers from `seed` (actor_rollout_ref.rollout.seed); remove rollout.sampling.seed"
        )
    if "concurrency" in r.changed():
        out.append(
            "rollout.concurrency: verl runs a step's samples all at once across its agent-loop workers; remove it "
            "(raw override actor_rollout_ref.rollout.agent.num_workers=N sets the workers)"
        )
    if e.name != "transformers":
        out.append(
            f"engine.name ({e.name!r}): verl generates with its own rollout servers (--rollout vllm|sglang); "
            "remove engine.name for the verl backend"
        )
    for name in ("base_url", "model", "api_key", "api_key_env"):
        if getattr(e, name) is not None:
            out.append(
                f"engine.{name}: verl generates with its own rollout servers; remove engine.{name} for the verl backend"
            )
    for name, settings in config._settings.items():
        if getattr(settings, "mode", None) == "group":
            out.append(
                f"{name}.mode (group): verl scores one sample at a time, so a group-mode judge would compare "
                f"nothing; set {name}.mode=pointwise for the verl backend"
            )
    return out


LOCAL_ONLY = {
    "engine.device": "verl's rollout servers run on the GPUs Ray gives them",
    "engine.threads": "verl's rollout servers run on the GPUs Ray gives them",
    "engine.timeout_s": "for the openai engine, which verl does not use",
    "engine.max_response_bytes": "for the openai engine, which verl does not use",
    "engine.chat_tools": "for the openai-chat engine, which is for rlf eval only",
}
"""Settings of the local engine that have nothing to act on under verl: a notice names each one set."""


def notices(config: RunConfig) -> list[str]:
    """One line per local-only setting the user set, saying why verl does not use it, and one per
    change :func:`tied_sync` makes to verl's weight sync."""
    return [
        f"{key}: not used by verl ({why})"
        for key, why in LOCAL_ONLY.items()
        if key.split(".")[1] in config.engine.changed()
    ] + [why for _, why in tied_sync(config).values()]


VERL_BUCKET_MB = 2048
"""verl 0.9.1's default ``rollout.checkpoint_engine.update_weights_bucket_megabytes``."""


def tied_bytes(folder: Path) -> int | None:
    """The float32 bytes of the model in ``folder`` when its output layer shares the input embedding's
    weights (``tie_word_embeddings``), else None (untied, or no local folder: a hub name)."""
    config = folder / "config.json"
    if not config.is_file() or not json.loads(config.read_text()).get("tie_word_embeddings", False):
        return None
    from safetensors import safe_open

    count = 0
    for shard in folder.glob("*.safetensors"):
        with safe_open(str(shard), "pt") as f:
            for key in f.keys():  # noqa: SIM118 - safe_open is no mapping
                count += math.prod(f.get_slice(key).get_shape())
    return 4 * count


def tied_sync(config: RunConfig) -> dict[str, tuple[Any, str]]:
    """verl overrides a model with tied embeddings needs: key → (value, the notice that says why).

    vLLM 0.32 loads ``lm_head.weight`` only together with the embedding it is tied to, in one
    ``load_weights`` call (else: "'lm_head.weight' was skipped because it is tied to ..."), and verl
    0.9.1 calls it once per bucket of its weight sync, the embedding first and the head last: the
    whole model must fit one bucket. With LoRA, vLLM names the wrapped embedding
    ``embed_tokens.base_layer`` and the same check fails on verl's base-weight sync whatever the bucket,
    so the adapters are merged into the weights before each sync (``lora.merge``)."""
    try:
        size = tied_bytes(Path(_model_path(config)))
    except TranslationError:
        return {}
    if size is None:
        return {}
    out: dict[str, tuple[Any, str]] = {}
    if config.trainer.lora is not None:
        out["actor_rollout_ref.model.lora.merge"] = (
            True,
            "trainer.lora on a model with tied embeddings: verl merges the adapters into the weights before "
            "each sync to vLLM (vLLM 0.32 cannot take the base weights of a LoRA model whose head is tied)",
        )
    mb = -(-size // 2**20) + 64
    if mb > VERL_BUCKET_MB:
        out["actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes"] = (
            mb,
            f"a model with tied embeddings syncs to vLLM in one bucket of {mb} MB (vLLM 0.32 loads the tied "
            "head only with its embedding): that much more accelerator memory during the sync",
        )
    return out


def lengths(config: RunConfig) -> tuple[int, int]:
    """verl's ``(prompt_length, response_length)`` for the rlf budgets.

    rlf's loop runs inside verl with the same config and keeps every trajectory within
    ``max_total_tokens`` and ``max_response_tokens`` itself, stopping a prompt that leaves no room;
    verl only needs bounds to pad to: a prompt of up to ``max_total_tokens - 1`` tokens, a response of
    up to ``min(max_response_tokens, max_total_tokens - 1)``.
    """
    r = config.rollout
    return r.max_total_tokens - 1, min(r.max_response_tokens, r.max_total_tokens - 1)


def micro_batch(per_gpu: int, cap: int) -> int:
    """verl's micro-batch per GPU: the largest divisor of a GPU's share of the step's samples that
    is at most ``trainer.micro_batch_size``, since verl's log-prob and update passes require the
    share to split into whole micro-batches (``workers/engine/utils.py:125``)."""
    return max((d for d in range(1, min(cap, per_gpu) + 1) if per_gpu % d == 0), default=1)


_DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def verl_overrides(
    config: RunConfig,
    config_path: str | Path,
    train_file: str | Path,
    val_file: str | Path | None = None,
    rlf_overrides: list[str] | None = None,
    run_dir: str | Path | None = None,
    cluster: Cluster | None = None,
    model_path: str | Path | None = None,
    resume: bool = False,
) -> list[str]:
    """verl overrides that run ``config`` with GRPO on the converted parquet files.

    ``model_path`` replaces ``model.path`` (the SFT warm start's output); ``resume`` continues from the
    run folder's latest verl checkpoint. Raises TranslationError naming every setting verl cannot honour.
    """
    from rlfcore.backends.verl import reward

    cluster = cluster or Cluster()
    config_path = Path(config_path).resolve()
    refused = refusals(config)
    if refused:
        raise TranslationError("the verl backend cannot run this config:\n  " + "\n  ".join(refused))
    t, r = config.trainer, config.rollout
    prompt_len, response_len = lengths(config)
    micro = micro_batch(t.prompts_per_step * r.n // max(1, cluster.gpus_per_node * cluster.nodes), t.micro_batch_size)
    rlf = {"config": str(config_path), "overrides": list(rlf_overrides or [])}
    actor = "actor_rollout_ref.actor"
    ref = "actor_rollout_ref.ref"
    rollout = "actor_rollout_ref.rollout"
    compute = "bfloat16" if t.bf16 else "float32"
    out: dict[str, Any] = {
        "algorithm.adv_estimator": "grpo",
        "algorithm.norm_adv_by_std_in_grpo": t.std_normalize,
        "algorithm.use_kl_in_reward": False,
        "data.train_files": str(Path(train_file).resolve()),
        "data.val_files": str(Path(val_file or train_file).resolve()),
        "data.train_batch_size": t.prompts_per_step,
        "data.max_prompt_length": prompt_len,
        "data.max_response_length": response_len,
        "data.return_raw_chat": True,
        "data.filter_overlong_prompts": False,
        "data.truncation": "error",
        "data.seed": config.seed,
        "actor_rollout_ref.model.path": str(model_path) if model_path else _model_path(config),
        f"{actor}.ppo_mini_batch_size": t.prompts_per_step,
        f"{actor}.ppo_micro_batch_size_per_gpu": micro,
        f"{actor}.ppo_epochs": t.epochs_per_step,
        f"{actor}.optim.lr": t.lr,
        f"{actor}.optim.weight_decay": t.weight_decay,
        f"{actor}.optim.lr_warmup_steps": t.warmup_steps or -1,
        f"{actor}.optim.lr_scheduler_type": t.lr_schedule,
        f"{actor}.grad_clip": t.max_grad_norm,
        f"{actor}.clip_ratio_low": t.clip_ratio,
        f"{actor}.clip_ratio_high": t.clip_ratio_high or t.clip_ratio,
        f"{actor}.use_kl_loss": t.kl_coef > 0,
        f"{actor}.kl_loss_coef": t.kl_coef,
        f"{actor}.loss_agg_mode": "token-mean" if t.loss_agg == "token-mean" else "seq-mean-token-mean",
        f"{actor}.fsdp_config.dtype": compute,
        f"{actor}.fsdp_config.seed": config.seed,
        f"{ref}.fsdp_config.dtype": compute,
        f"{rollout}.dtype": compute,
        f"{rollout}.seed": config.seed,
        f"{rollout}.name": cluster.rollout,
        f"{rollout}.mode": "async",
        f"{rollout}.n": r.n,
        f"{rollout}.temperature": r.sampling.temperature,
        f"{rollout}.top_p": r.sampling.top_p,
        f"{rollout}.top_k": r.sampling.top_k,
        f"{rollout}.calculate_log_probs": True,
        f"{rollout}.tensor_model_parallel_size": cluster.tensor_parallel,
        f"{rollout}.gpu_memory_utilization": cluster.gpu_memory_utilization,
        f"{rollout}.log_prob_micro_batch_size_per_gpu": micro,
        f"{rollout}.multi_turn.enable": True,
        f"{rollout}.multi_turn.max_assistant_turns": r.max_turns,
        f"{rollout}.agent.default_agent_loop": AGENT_NAME,
        f"{ref}.log_prob_micro_batch_size_per_gpu": micro,
        "reward.reward_manager.name": REWARD_MANAGER,
        "reward.custom_reward_function.path": reward.__file__,
        "reward.custom_reward_function.name": "compute_score",
        "+reward.custom_reward_function.reward_kwargs.rlf_config": rlf["config"],
        "+reward.custom_reward_function.reward_kwargs.rlf_overrides": rlf["overrides"],
        "+rlf.config": rlf["config"],
        "+rlf.overrides": rlf["overrides"],
        "trainer.total_training_steps": t.steps,
        "trainer.total_epochs": max(1, t.steps),
        "trainer.save_freq": t.checkpoint_every,
        "trainer.resume_mode": "auto" if resume else "disable",
        "trainer.test_freq": -1,
        "trainer.val_before_train": False,
        "trainer.logger": ["console", *t.loggers],
        "trainer.project_name": t.project,
        "trainer.experiment_name": (config.source or config_path).stem,  # a resume reads the run's copy
        "trainer.n_gpus_per_node": cluster.gpus_per_node,
        "trainer.nnodes": cluster.nodes,
    }
    if t.max_staleness:
        out.update(one_step_off(config, cluster))
    if config.model.dtype != "auto":
        out[f"{actor}.fsdp_config.model_dtype"] = _DTYPES[config.model.dtype]
        out[f"{ref}.fsdp_config.model_dtype"] = _DTYPES[config.model.dtype]
    if t.lora is not None:  # verl's own LoRA (FSDP actor, adapters synced to the rollout servers)
        out["actor_rollout_ref.model.lora_rank"] = t.lora.rank
        out["actor_rollout_ref.model.lora_alpha"] = t.lora.alpha
        out["actor_rollout_ref.model.target_modules"] = list(t.lora.target_modules)
    out.update({key: value for key, (value, _) in tied_sync(config).items()})
    if config.model.tokenizer:
        out["actor_rollout_ref.model.tokenizer_path"] = str(Path(config.model.tokenizer).expanduser())
    if t.micro_batch_tokens is not None:
        out[f"{actor}.use_dynamic_bsz"] = True
        out[f"{actor}.ppo_max_token_len_per_gpu"] = t.micro_batch_tokens
    if "max_batch_size" in config.engine.changed():
        out[f"{rollout}.max_num_seqs"] = config.engine.max_batch_size
    if run_dir is not None:
        run = Path(run_dir).resolve()
        out["trainer.default_local_dir"] = str(run / "checkpoints")
        if t.samples_per_step > 0:
            out["trainer.rollout_data_dir"] = str(run / "samples")
            out["+reward.custom_reward_function.reward_kwargs.rlf_samples_dir"] = str(run / "samples")
        out["trainer.logger"] = ["console", "file", *t.loggers]  # verl's file logger feeds `rlf ui`'s curves
        out[f"+ray_kwargs.ray_init.runtime_env.env_vars.{METRICS_ENV}"] = str(run / METRICS_FILE)
    if cluster.ray_address:
        out["+ray_kwargs.ray_init.address"] = cluster.ray_address
    for name, value in cluster.env_vars.items():
        out[f"+ray_kwargs.ray_init.runtime_env.env_vars.{name}"] = value
    return [f"{k}={hydra_value(v)}" for k, v in out.items()]


ONE_STEP_OFF = "verl.experimental.one_step_off_policy.main_ppo"
"""verl's one-step-off trainer: rollouts of step s + 1 run on their own GPUs while step s trains."""


def one_step_off(config: RunConfig, cluster: Cluster) -> dict[str, Any]:
    """Overrides that run ``trainer.max_staleness: 1`` as verl's one-step-off trainer: each node's GPUs
    split between the trainer and a standalone rollout pool, weights moved between them over NCCL,
    and the rollout's importance weights truncated at ``trainer.importance_bound``."""
    if cluster.gpus_per_node < 2:  # noqa: PLR2004 - one for the trainer, one for the rollout
        raise TranslationError(
            "trainer.max_staleness: verl's one-step-off trainer keeps its rollout on GPUs of its own, apart "
            f"from the trainer's; give it at least 2 per node (--gpus), not {cluster.gpus_per_node}"
        )
    rollout_gpus = cluster.gpus_per_node // 2
    return {
        "actor_rollout_ref.hybrid_engine": False,
        "trainer.n_gpus_per_node": cluster.gpus_per_node - rollout_gpus,
        "rollout.nnodes": cluster.nodes,
        "rollout.n_gpus_per_node": rollout_gpus,
        "actor_rollout_ref.rollout.checkpoint_engine.backend": "nccl",
        "algorithm.rollout_correction.rollout_is": "token",
        "algorithm.rollout_correction.rollout_is_threshold": config.trainer.importance_bound,
    }


def entry(config: DictConfig) -> str:
    """The verl module that trains this config: the PPO trainer, or the one-step-off one."""
    return ONE_STEP_OFF if config.actor_rollout_ref.get("hybrid_engine", True) is False else "verl.trainer.main_ppo"


def verl_root() -> str:
    """The folder verl is installed in: its experimental trainers find their base config at the
    relative search path ``file://verl/trainer/config``, so they are composed and run from there."""
    import verl

    return os.path.dirname(os.path.dirname(verl.__file__))


def config_dir(one_step: bool = False) -> str:
    """verl's trainer config folder (``ppo_trainer.yaml`` and its groups), or the one-step-off one's."""
    import verl.trainer

    if one_step:
        return os.path.join(verl_root(), *ONE_STEP_OFF.split(".")[:-1], "config")
    return os.path.join(os.path.dirname(verl.trainer.__file__), "config")


def compose(overrides: list[str]) -> DictConfig:
    """verl's PPO trainer config with ``overrides`` applied, as ``verl.trainer.main_ppo`` would build
    it, or as the one-step-off trainer would when the overrides turn the hybrid engine off."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    one_step = "actor_rollout_ref.hybrid_engine=false" in overrides
    name = "one_step_off_ppo_trainer" if one_step else "ppo_trainer"
    here = os.getcwd()
    try:
        if one_step:
            os.chdir(verl_root())
        with initialize_config_dir(config_dir=config_dir(one_step), version_base=None):
            return hydra_compose(name, overrides=overrides)
    except (HydraException, OmegaConfBaseException) as exc:
        raise TranslationError(f"verl rejects the overrides: {exc}") from None
    finally:
        os.chdir(here)


def validate(cfg: DictConfig) -> None:
    """Run verl's own config validation (what ``main_ppo`` does before starting Ray)."""
    import warnings

    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # GRPO disables the critic on purpose
            validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    except Exception as exc:  # verl raises AssertionError and hydra InstantiationException alike
        cause = exc.__cause__ or exc
        raise TranslationError(f"verl's config validation failed: {type(cause).__name__}: {cause}") from None
