"""What a resumed run may change in its config, and what it may not.

A run's ``config.yaml`` is its record: the model, data, group size, seed and algorithm its metrics and
checkpoints come from. ``--resume`` with other values there would continue one run as if it were
another, so those changes are refused, each named with its old and new value; settings that only say
how long, how fast or how loudly to train (the learning rate and its schedule, the steps, checkpoints,
trackers, batching, the API key) may change, and :meth:`LocalTrainer.restore` applies them to the restored
optimizer and schedule. ``rlf train --run-dir RUN --resume`` reads the record itself, so the only
changes are the overrides given with it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from rlfcore.backends.local.lock import RunDirError
from rlfcore.schema import RunConfig, redacted

RESUMABLE = (
    "trainer.steps",
    "trainer.lr",
    "trainer.lr_schedule",
    "trainer.warmup_steps",
    "trainer.weight_decay",
    "trainer.max_grad_norm",
    "trainer.micro_batch_size",
    "trainer.micro_batch_tokens",
    "trainer.bf16",
    "trainer.device",
    "trainer.checkpoint_every",
    "trainer.samples_per_step",
    "trainer.loggers",
    "trainer.project",
    "engine.device",
    "engine.threads",
    "engine.api_key",
    "engine.api_key_env",
    "engine.max_batch_size",
    "rollout.concurrency",
    "tools.max_concurrency",
    "reward.processes",
)
"""Settings a resumed run may change: none changes what the recorded steps mean."""

_ABSENT = object()


class ConfigChanged(RunDirError):
    """``--resume`` with a config that differs from the run's record where the record cannot change."""


Change = tuple[str, Any, Any]
"""A dotted path, its recorded value and its new one (``_ABSENT`` where one side lacks it)."""


def config_changes(recorded: dict[str, Any], config: RunConfig) -> list[Change]:
    """Every leaf that differs between a recorded resolved config and ``config``, by dotted path, in the
    new config's order. A setting the record lacks (written by an rlf that did not have it yet) at its
    default is no change: the old run used that behaviour too."""
    out: list[Change] = []

    def walk(old: Any, new: Any, prefix: str) -> None:
        if old is _ABSENT:
            if new == _default(config, prefix[:-1]):
                return
            if isinstance(new, dict):
                old = {}
        if isinstance(old, dict) and isinstance(new, dict):
            for key in [*new, *(k for k in old if k not in new)]:
                walk(old.get(key, _ABSENT), new.get(key, _ABSENT), f"{prefix}{key}.")
        elif old != new:
            out.append((prefix[:-1], old, new))

    walk(recorded, config.resolved(), "")
    return out


def _default(config: RunConfig, name: str) -> Any:
    """The default of the setting at dotted path ``name`` as :meth:`RunConfig.resolved` writes it, read
    from the schema of the section that holds it (a plugin's for its own section); ``_ABSENT`` where no
    schema names it (an entry of a free-form mapping, an unknown section)."""
    *sections, field = name.split(".")
    owner: Any = config
    for part in sections:
        if isinstance(owner, BaseModel) and part in type(owner).model_fields:
            owner = getattr(owner, part)
        elif owner is config and config.settings(part) is not None:
            owner = config.settings(part)
        else:
            return _ABSENT
    if not isinstance(owner, BaseModel) or field not in type(owner).model_fields:
        return _ABSENT
    value = type(owner).model_fields[field].get_default(call_default_factory=True)
    return redacted({field: to_jsonable_python(value)})[field]


def check_resume_config(run: Path, config: RunConfig, allow_change: bool) -> list[Change]:
    """The changes a resume of ``run`` with ``config`` accepts; a :class:`ConfigChanged` listing the
    others, unless ``allow_change``. A run folder without ``config.yaml`` has no record to keep."""
    path = run / "config.yaml"
    if not path.is_file():
        return []
    changes = config_changes(yaml.safe_load(path.read_text()) or {}, config)
    refused = [c for c in changes if not _resumable(c[0])]
    if refused and not allow_change:
        listed = "\n".join(f"  {name}: {_show(old)} -> {_show(new)}" for name, old, new in refused)
        raise ConfigChanged(
            f"cannot resume {run} with this config: it changes what the run's steps so far mean "
            f"(recorded in {path}):\n{listed}\nresume with the recorded values, start a new --run-dir, "
            "or pass --allow-config-change to continue with the new ones anyway"
        )
    return changes


def describe(changes: list[Change]) -> str:
    """``trainer.lr: 0.01 -> 0.001, trainer.steps: 4 -> 6``."""
    return ", ".join(f"{name}: {_show(old)} -> {_show(new)}" for name, old, new in changes)


def _resumable(name: str) -> bool:
    return any(name == r or name.startswith(r + ".") for r in RESUMABLE)


def _show(value: Any) -> str:
    return "(not set)" if value is _ABSENT else json.dumps(value)
