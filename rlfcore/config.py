"""Reading a run config: one YAML file, overrides, the plugins it enables, validated before anything heavy starts.

The schema (the core's sections, :class:`RunConfig`, :class:`ConfigError`) lives in
:mod:`rlfcore.schema`, below the plugin machinery; its names are here too, so ``from rlfcore.config
import RunConfig, load_config, ConfigError`` keeps working. Each enabled plugin owns the top-level
section named after it, validated against the schema it registered. Every mistake is reported at
once with its dotted path, the bad value and what was expected.

Paths written in a config file are read from that file's folder; paths typed as overrides on a
command line are read from the current folder, as in every CLI (:func:`typed_overrides`).
"""

from __future__ import annotations

import difflib
import json
import os
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from rlfcore.hookcall import config_schema
from rlfcore.paths import config_dir, recorded_source
from rlfcore.plugins import PluginError, PluginManager
from rlfcore.schema import (
    LORA_TARGETS,
    REDACTED,
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
    is_secret,
    missing_key_env,
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
    "typed_overrides",
]

PATH_SETTINGS = (
    "model.path",
    "model.tokenizer",
    "model.init.tokenizer",
    "model.init.texts",
    "data.train",
    "data.eval",
    "sft.data",
    "sft.tools",
    "local_plugins",
    "agent.entry",
)
"""The core's settings that name files or folders (a list: each entry). Plugins' sections carry no such
mark, so a plugin's path typed on the command line is read from the config's folder, as in the file."""


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


def typed_overrides(overrides: list[str] | tuple[str, ...], cwd: Path | None = None) -> list[str]:
    """``overrides`` as a command line gives them: a relative path in a :data:`PATH_SETTINGS` setting is
    made absolute from ``cwd`` (the current folder), since the user typed it there, not in the config's
    folder. Whole sections (``data={train: a.jsonl}``) are looked through; other overrides are unchanged."""
    here = cwd or Path.cwd()
    out = []
    for item in overrides:
        key, sep, raw = item.partition("=")
        key = key.strip()
        inside = [p for p in PATH_SETTINGS if p == key or p.startswith(key + ".")]
        if not sep or not key or not inside:
            out.append(item)
            continue
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        changed = value
        for setting in inside:
            changed = _typed_at(
                changed, setting[len(key) :].lstrip(".").split(".") if setting != key else [], setting, here
            )
        out.append(item if changed == value else f"{key}={json.dumps(changed)}")
    return out


def _typed_at(value: Any, rest: list[str], setting: str, here: Path) -> Any:
    """``value`` with the path at ``rest`` inside it (``[]``: ``value`` itself) made absolute from ``here``."""
    if rest:
        if not isinstance(value, dict) or rest[0] not in value:
            return value
        return {**value, rest[0]: _typed_at(value[rest[0]], rest[1:], setting, here)}
    if isinstance(value, list):
        return [_typed_path(v, setting, here) for v in value]
    return _typed_path(value, setting, here)


def _typed_path(value: Any, setting: str, here: Path) -> Any:
    """One typed path made absolute; what is no path is left alone: a module name in ``local_plugins``
    or ``agent.entry``, and for ``model.path`` / ``model.tokenizer`` a hub id (``org/name`` with no
    ``org`` folder here)."""
    if not isinstance(value, str) or not value:
        return value
    suffix = ""
    if setting == "agent.entry":
        value, _, fn = value.rpartition(":") if ":" in value else (value, "", "")
        suffix = f":{fn}" if fn else ""
    if setting in ("local_plugins", "agent.entry") and not value.endswith(".py"):
        return value + suffix
    path = Path(value).expanduser()
    hub_like = not value.startswith((".", "/", "~")) and value.count("/") == 1 and not (here / path.parts[0]).exists()
    if setting in ("model.path", "model.tokenizer") and hub_like:
        return value
    return os.path.normpath(path if path.is_absolute() else here / path) + suffix


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
            shown = REDACTED if is_secret(str(loc[-1])) and isinstance(err["input"], str) else err["input"]
            msg = f"unknown key (value {shown!r})"
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
    origin: Path | None = None
    if isinstance(source, dict):
        data, label, base = dict(source), "config", Path.cwd()
    else:
        data, label = read_yaml(source), str(source)
        origin = recorded_source(Path(source).read_text())  # a run's saved copy: paths as in the original
        base = config_dir(origin or source)
    issues = apply_overrides(data, overrides or [])
    issues += _redacted_values(data)

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
        config._source = None if isinstance(source, dict) else (origin or Path(source))
        issues += _check_envs(config, manager)
        issues += _check_key_env(config)
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
            how = "" if Path(value).is_absolute() else " (read relative to the config's folder)"
            issues.append(ConfigIssue(path=key, message=f"no such file: {config.path(value)}{how}"))
    return issues


def _redacted_values(data: Any, prefix: str = "") -> list[ConfigIssue]:
    """Secrets a saved config holds only as :data:`REDACTED`: a run folder never keeps one, so a config
    read back from it needs them given again."""
    issues = []
    if isinstance(data, (dict, list)):
        items = data.items() if isinstance(data, dict) else ((f"[{i}]", v) for i, v in enumerate(data))
        for key, value in items:
            path = f"{prefix}{key}" if str(key).startswith("[") else f"{prefix}.{key}" if prefix else str(key)
            if value == REDACTED:
                how = " (better: engine.api_key_env=NAME, the variable holding it)" if path == "engine.api_key" else ""
                issues.append(
                    ConfigIssue(
                        path=path,
                        message=f"a secret, not saved with the config: give it again as {path}=...{how}",
                    )
                )
            else:
                issues += _redacted_values(value, path)
    return issues


def _check_key_env(config: RunConfig) -> list[ConfigIssue]:
    """``engine.api_key_env`` naming an unset variable, for the engines that send the key."""
    name = config.engine.api_key_env
    if name is None or config.engine.name not in ("openai", "openai-chat") or os.environ.get(name):
        return []
    return [ConfigIssue(path="engine.api_key_env", message=missing_key_env(name))]


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
