"""Reading a run config: one YAML file, overrides, the plugins it enables, validated before anything heavy starts.

The schema (the core's sections, :class:`RunConfig`, :class:`ConfigError`) lives in
:mod:`rlfcore.schema`, below the plugin machinery; its names are here too, so ``from rlfcore.config
import RunConfig, load_config, ConfigError`` keeps working. Each enabled plugin owns the top-level
section named after it, validated against the schema it registered. Every mistake is reported at
once with its dotted path, the bad value and what was expected.
"""

from __future__ import annotations

import difflib
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from rlfcore.hookcall import config_schema
from rlfcore.paths import config_dir
from rlfcore.plugins import PluginError, PluginManager
from rlfcore.schema import (
    LORA_TARGETS,
    ConfigError,
    ConfigIssue,
    DataConfig,
    EngineConfig,
    LoraConfig,
    ModelConfig,
    ModelInit,
    RewardConfig,
    RolloutConfig,
    RunConfig,
    SamplingConfig,
    SFTConfig,
    ToolsConfig,
    TrainerConfig,
)

__all__ = [
    "LORA_TARGETS",
    "ConfigError",
    "ConfigIssue",
    "DataConfig",
    "EngineConfig",
    "LoraConfig",
    "ModelConfig",
    "ModelInit",
    "RewardConfig",
    "RolloutConfig",
    "RunConfig",
    "SFTConfig",
    "SamplingConfig",
    "ToolsConfig",
    "TrainerConfig",
    "apply_overrides",
    "load_config",
    "missing_files",
    "read_yaml",
]


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
        schema = config_schema(manager, name)
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
