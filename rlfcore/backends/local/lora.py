"""LoRA for the local trainer (``trainer.lora``): one copy of the weights, of which only adapters train.

peft wraps the policy in place (:func:`wrap`): the base weights stay frozen and are the KL reference
with the adapters switched off (:func:`reference`), so no second model is kept. The rollout engine
samples from :func:`sampler`, the same modules with the adapters on, so every optimizer step is
seen at its next batch (the adapters' parameters are among those whose versions it reads).
Checkpoints hold the adapter alone (``adapter_model.safetensors``); :func:`merge` folds one into its
base model and writes a plain Hugging Face folder for ``rlf eval``, vLLM and verl.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from rlfcore.schema import LoraConfig

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
)


class LoraError(RuntimeError):
    """An adapter cannot be loaded or merged; the message names the folder and what is wrong."""


def wrap(model: Any, settings: LoraConfig, adapter: Path | None = None) -> Any:
    """``model`` with fresh LoRA adapters of ``settings`` (``adapter``: the trained ones saved there),
    trainable, its own weights frozen."""
    from peft import LoraConfig as PeftLoraConfig
    from peft import PeftModel, get_peft_model

    if adapter is not None:
        check_adapter(adapter)
        return PeftModel.from_pretrained(model, adapter, is_trainable=True)
    config = PeftLoraConfig(
        r=settings.rank,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=list(settings.target_modules),
        task_type="CAUSAL_LM",
    )
    try:
        return get_peft_model(model, config)
    except ValueError as exc:  # peft's error when no layer has one of the names
        raise LoraError(f"trainer.lora.target_modules {settings.target_modules}: {exc}") from exc


def is_adapted(model: Any) -> bool:
    """Whether ``model`` is a peft model (its ``save_pretrained`` writes an adapter); peft unimported
    means none is."""
    peft = sys.modules.get("peft")
    return peft is not None and isinstance(model, peft.PeftModel)


def trainable(model: Any) -> list[torch.nn.Parameter]:
    """The parameters an optimizer updates: all of them in full fine-tuning, the adapters' with LoRA."""
    return [p for p in model.parameters() if p.requires_grad]


def sampler(model: Any) -> Any:
    """What the rollout engine generates from: the transformers model itself, whose layers hold the
    adapters (peft's wrapper forward lacks ``logits_to_keep``, so a prefill would compute every
    position's logits)."""
    return model.get_base_model() if is_adapted(model) else model


@contextmanager
def reference(model: Any) -> Iterator[Any]:
    """The base model, ``model`` with its adapters off for the block: the frozen start a KL term needs."""
    with model.disable_adapter():
        yield model


def check_adapter(folder: Path) -> None:
    """A :class:`LoraError` unless ``folder`` holds an adapter's config and weights."""
    missing = [name for name in (ADAPTER_CONFIG, ADAPTER_WEIGHTS) if not (folder / name).is_file()]
    if missing:
        raise LoraError(f"{folder} holds no LoRA adapter: {', '.join(missing)} missing")


def load_weights(model: Any, weights: dict[str, torch.Tensor], source: Path) -> None:
    """Put adapter ``weights`` (read from ``source``) into ``model``'s adapters, every one of them."""
    from peft import set_peft_model_state_dict

    result = set_peft_model_state_dict(model, weights)
    unexpected = list(getattr(result, "unexpected_keys", []))
    missing = [k for k in getattr(result, "missing_keys", []) if "lora_" in k]
    if unexpected or missing:
        raise LoraError(
            f"{source} does not fit this run's adapters (trainer.lora): "
            f"{len(missing)} missing, {len(unexpected)} unexpected, e.g. {(missing + unexpected)[:2]}"
        )


def adapter_folder(checkpoint: Path) -> Path:
    """The adapter of a checkpoint folder (``step_N`` or ``sft``, or its ``model`` folder)."""
    folder = checkpoint / "model" if (checkpoint / "model").is_dir() else checkpoint
    if not (folder / ADAPTER_CONFIG).is_file():
        if (folder / "config.json").is_file():
            raise LoraError(f"{folder} is a whole model already (full fine-tuning): use it as it is, nothing to merge")
        raise LoraError(f"{checkpoint} is not a LoRA checkpoint: no {ADAPTER_CONFIG} in {folder}")
    return folder


def base_of(folder: Path) -> Path:
    """The base model an adapter was trained on, as its ``adapter_config.json`` records it."""
    recorded = json.loads((folder / ADAPTER_CONFIG).read_text()).get("base_model_name_or_path")
    if not recorded:
        raise LoraError(f"{folder / ADAPTER_CONFIG} names no base model: pass it with --base")
    return Path(recorded)


def merge(checkpoint: Path, out: Path, base: Path | None = None) -> Path:
    """Fold the adapter of ``checkpoint`` into its base model (``base``, else the one the adapter
    records) and write the whole model, in the base's dtype, with the tokenizer files, to ``out``:
    written in a temporary folder beside it and renamed, so ``out`` is never half-written."""
    from peft import PeftModel
    from transformers import AutoConfig, AutoModelForCausalLM

    folder = adapter_folder(checkpoint)
    check_adapter(folder)
    base = base or base_of(folder)
    if not (base / "config.json").is_file():
        raise LoraError(f"the base model {base} of {folder} is not a model folder (no config.json): pass --base")
    if out.exists():
        raise LoraError(f"{out} exists: choose a new folder to write the merged model to")
    stored = AutoConfig.from_pretrained(base, local_files_only=True).dtype
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32, local_files_only=True)  # an exact sum
    merged = PeftModel.from_pretrained(model, folder).merge_and_unload()
    if isinstance(stored, torch.dtype):
        merged.to(stored)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        merged.save_pretrained(tmp)
        source = folder if (folder / "tokenizer_config.json").is_file() else base
        for name in TOKENIZER_FILES:
            if (source / name).is_file():
                shutil.copy2(source / name, tmp / name)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
