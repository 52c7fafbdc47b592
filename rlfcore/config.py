"""Reading a run config: one YAML file, overrides, the plugins it enables, validated before anything heavy starts.

The schema (the core's sections, :class:`RunConfig`, :class:`ConfigError`) lives in
:mod:`rlfcore.schema`, below the plugin machinery; its names are here too, so ``from rlfcore.config
import RunConfig, load_config, ConfigError`` keeps working. Each enabled plugin owns the top-level
section named after it, validated against the schema it registered. Every mistake is reported at
once with its dotted path, the bad value and what was expected.

Paths written in a config file are read from that file's folder; paths typed as overrides on a
command line are read from the current folder, as in every CLI (:func:`typed_overrides`).

:func:`validate` is what the commands call: one pass that finds every problem a command would meet
before it starts anything (the schema, then the files it reads and the model it needs), so a config
with several mistakes is fixed in one round and ``rlf config``, ``rlf train`` and ``rlf eval`` say the
same words with the same exit code.
"""

from __future__ import annotations

import collections.abc
import difflib
import json
import os
import typing
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ValidationError

from rlfcore.hookcall import config_schema
from rlfcore.paths import config_dir, in_hub_cache, recorded_source
from rlfcore.plugins import PluginError, PluginManager
from rlfcore.schema import (
    CHAT_ENGINES,
    LORA_TARGETS,
    REDACTED,
    TRAINING_REFUSED,
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
    "Command",
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
    "model_issue",
    "read_yaml",
    "typed_overrides",
    "validate",
]

PATH_SETTINGS = (
    "model.path",
    "model.tokenizer",
    "model.init.tokenizer",
    "model.init.texts",
    "data.train",
    "data.eval",
    "data.difficulty",
    "sft.data",
    "sft.tools",
    "local_plugins",
    "agent.entry",
)
"""The core's settings that name files or folders (a list: each entry). A plugin marks its own by typing
them ``pathlib.Path`` in its schema (:func:`plugin_path_settings`)."""


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
    """``overrides`` as a command line gives them: a relative path in a :data:`PATH_SETTINGS` setting, or
    in an installed plugin's (:func:`plugin_path_settings`), is made absolute from ``cwd`` (the current
    folder), since the user typed it there, not in the config's folder. Whole sections (``data={train:
    a.jsonl}``) are looked through; other overrides are unchanged."""
    here = cwd or Path.cwd()
    sections = {item.partition("=")[0].strip().split(".")[0] for item in overrides}
    known = PATH_SETTINGS + plugin_path_settings(sections - set(RunConfig.model_fields))
    out = []
    for item in overrides:
        key, sep, raw = item.partition("=")
        key = key.strip()
        inside = [p for p in known if p == key or p.startswith(key + ".")]
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


def plugin_path_settings(names: Collection[str]) -> tuple[str, ...]:
    """The path settings of the installed plugins in ``names``, dotted (``nl2sql.db``): the fields of
    its schema typed ``pathlib.Path`` (also ``Path | None``, ``list[Path]``, and inside a nested
    section). A name that is no installed plugin, or one that fails to load, has none here: reading
    the config says why."""
    if not names:
        return ()
    manager = PluginManager()
    try:
        manager.discover(builtins=False)
    except PluginError:
        return ()
    found: list[str] = []
    for name in sorted(set(names) & set(manager.infos)):
        try:
            manager.load(name)
        except PluginError:
            continue
        schema = config_schema(manager, name)
        found += _path_fields(schema, name) if schema is not None else []
    return tuple(found)


def _path_fields(schema: type[BaseModel], prefix: str) -> list[str]:
    """The dotted names of ``schema``'s fields typed with a path, its nested sections' included."""
    found = []
    for name, field in schema.model_fields.items():
        kinds = _kinds(field.annotation)
        if any(issubclass(k, PurePath) for k in kinds):
            found.append(f"{prefix}.{name}")
        found += [p for k in kinds if issubclass(k, BaseModel) for p in _path_fields(k, f"{prefix}.{name}")]
    return found


def _kinds(annotation: Any) -> list[type]:
    """The classes an annotation takes a value of, looking through ``X | None``, unions and lists
    (not mappings: their keys are the user's names, not settings)."""
    origin = typing.get_origin(annotation)
    if origin in (dict, collections.abc.Mapping):
        return []
    if origin is None:
        return [annotation] if isinstance(annotation, type) else []
    return [k for arg in typing.get_args(annotation) for k in _kinds(arg)]


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
    if setting in ("model.path", "model.tokenizer") and _hub_like(value, here):
        return value
    path = Path(value).expanduser()
    return os.path.normpath(path if path.is_absolute() else here / path) + suffix


def _hub_like(value: str, here: Path) -> bool:
    """Whether a model setting may name a Hugging Face hub id: ``org/name``, with no ``org`` folder in ``here``."""
    return (
        not value.startswith((".", "/", "~")) and value.count("/") == 1 and not (here / Path(value).parts[0]).exists()
    )


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


@dataclass
class _Reading:
    """What reading a config found: the config (its ``invalid`` top-level settings at their defaults;
    ``None`` when even so it cannot be read), the manager with its plugins loaded, and every issue."""

    config: RunConfig | None
    manager: PluginManager
    issues: list[ConfigIssue]
    invalid: set[str]
    label: str

    def valid(self, *sections: str) -> bool:
        """Whether a check reading ``sections`` can run: the config was read and none of them failed."""
        return self.config is not None and not self.invalid.intersection(sections)

    def check(self, sections: tuple[str, ...], found: Callable[[RunConfig], list[ConfigIssue]]) -> None:
        """Add the issues ``found`` gives, unless a section it reads failed the schema."""
        if self.config is not None and not self.invalid.intersection(sections):
            self.issues += found(self.config)


def _read(  # noqa: PLR0912, PLR0915 - the reading's steps in order, each collecting its issues
    source: str | Path | dict[str, Any], overrides: list[str] | None, manager: PluginManager | None
) -> _Reading:
    """Read, override, enable plugins, validate, and check what needs only the config: every issue, raising
    none (but for an unreadable file, which leaves nothing to check)."""
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

    config, invalid, core_issues = _core(data)
    if config is not None:
        config._settings = settings
        config._source = None if isinstance(source, dict) else (origin or Path(source))
    reading = _Reading(config, manager, issues + core_issues, invalid, label)
    reading.check(("plugins", "local_plugins", "envs", "data"), lambda c: _check_envs(c, manager))
    reading.check(("engine",), _check_key_env)
    reading.check(("trainer",), _check_loggers)
    return reading


def _core(data: dict[str, Any]) -> tuple[RunConfig | None, set[str], list[ConfigIssue]]:
    """The core settings validated: the config, the top-level settings that failed, and their issues.
    When some failed, the config is read again with those at their defaults, so the checks of the
    sections that passed still run; ``None`` when even that fails (a rule across sections)."""
    try:
        return RunConfig.model_validate(data), set(), []
    except ValidationError as exc:
        issues = _issues_from(exc, RunConfig)
        for issue in issues:
            if issue.message.startswith("unknown key") and "." not in issue.path:
                issue.message = (
                    "unknown key: neither a core setting nor an enabled plugin's section"
                    + (issue.message[len("unknown key") :])
                )
        errors = exc.errors()
    invalid = {str(err["loc"][0]) for err in errors if err["loc"]}
    if any(not err["loc"] for err in errors):
        return None, invalid, issues
    try:
        return RunConfig.model_validate({k: v for k, v in data.items() if k not in invalid}), invalid, issues
    except ValidationError:
        return None, invalid, issues


def load_config(
    source: str | Path | dict[str, Any],
    overrides: list[str] | None = None,
    manager: PluginManager | None = None,
) -> tuple[RunConfig, PluginManager]:
    """Read, override, enable plugins and validate: a RunConfig and the manager with its plugins loaded.

    Raises ConfigError with every mistake found, or PluginError when an enabled plugin fails to load.
    A command checks more (the files it reads, the model it needs) through :func:`validate`.
    """
    reading = _read(source, overrides, manager)
    if reading.issues or reading.config is None:
        raise ConfigError(reading.issues, source=reading.label)
    return reading.config, reading.manager


Command = Literal["config", "train", "sft", "eval"]
"""The commands :func:`validate` checks a config for: each reads its own files and needs its own model."""


def validate(
    source: str | Path,
    overrides: list[str] | None = None,
    command: Command = "config",
    backend: str = "local",
    warn: Callable[[ConfigIssue], None] | None = None,
) -> tuple[RunConfig, PluginManager]:
    """Every problem ``command`` would meet with this config, found before it starts anything and raised
    as one ConfigError: :func:`load_config`'s (the schema first, then plugins, environments, keys and
    trackers), then :func:`missing_files` and :func:`model_issue`. A check that reads a section that
    failed the schema is skipped; the others still run, so one round shows every mistake.

    ``rlf config`` (``command="config"``) gives a missing model to ``warn`` instead: it cannot tell a
    config meant for ``--backend verl`` (which downloads a hub model) or a served engine from a local run.
    """
    reading = _read(source, overrides, None)
    config = reading.config
    if config is not None:
        reading.issues += missing_files(config, command, backend, skip=reading.invalid)
        if command == "train":
            reading.check(("engine",), _check_chat_engine)
        reading.check(("engine", "agent"), _check_agent_engine)
        need = _model_need(config, command, backend)
        sections = ("model",) if command in ("train", "sft") else ("model", "engine")
        issue = model_issue(config, need) if need is not None and reading.valid(*sections) else None
        if issue is not None and command != "config":
            reading.issues.append(issue)
        elif issue is not None and warn is not None and (config.model.tokenizer or config.model.path):
            warn(issue)  # a model named but not found; rlf config says nothing of one not named
    if reading.issues or config is None:
        raise ConfigError(reading.issues, source=reading.label)
    return config, reading.manager


def missing_files(
    config: RunConfig, command: Command = "config", backend: str = "local", skip: Collection[str] = ()
) -> list[ConfigIssue]:
    """The files ``command`` reads that do not exist (each read relative to the config's folder), and the
    one it cannot run without when it is not set; settings under a section of ``skip`` are not looked at."""
    issues = []
    for key, value in _files_read(config, command, backend):
        if key.split(".")[0] in skip:
            continue
        if not value:
            reads = (
                "rlf eval reads its rows from data.eval (or data.train)"
                if command == "eval"
                else f"rlf {command} reads it"
            )
            issues.append(ConfigIssue(path=key, message=f"not set: {reads}"))
        elif not (config.path(value).is_dir() if key == "model.init.tokenizer" else config.path(value).exists()):
            how = "" if Path(value).expanduser().is_absolute() else " (read relative to the config's folder)"
            what = "folder" if key == "model.init.tokenizer" else "file"
            issues.append(ConfigIssue(path=key, message=f"no such {what}: {config.path(value)}{how}"))
    return issues


def _files_read(config: RunConfig, command: Command, backend: str) -> list[tuple[str, str | None]]:
    """Each file setting ``command`` reads and its value: those set, and the one it needs even when unset
    (``data.train`` to train, ``sft.data`` for ``rlf sft``, ``data.eval`` or ``data.train`` to evaluate),
    with ``model.init``'s while it is to build the model. ``rlf config`` looks at every one that is set."""
    data, sft, init = config.data, config.sft, config.model.init
    named: list[tuple[str, str | None]] = []
    if command == "eval":
        named.append(("data.eval", data.eval) if data.eval or not data.train else ("data.train", data.train))
        needed: str | None = named[0][0]
    else:
        if command != "sft":
            named += [("data.train", data.train), ("data.difficulty", data.difficulty)]
        if command == "config" or backend == "verl":
            named.append(("data.eval", data.eval))
        if command != "train" or sft.steps:
            named += [("sft.data", sft.data), ("sft.tools", sft.tools)]
        needed = {"train": "data.train", "sft": "sft.data"}.get(command)
    if init is not None and builds_model(config, command):
        named += [("model.init.tokenizer", init.tokenizer)] if init.tokenizer else []
        named += [(f"model.init.texts[{i}]", t) for i, t in enumerate(init.texts)]
    return [(key, value) for key, value in named if value or key == needed]


def builds_model(config: RunConfig, command: Command) -> bool:
    """Whether ``command`` builds the model ``model.init`` describes: ``model.path`` holds none yet
    (no ``config.json``). ``rlf eval`` builds it as training does when it reads anything of it: not
    for a chat API's engine (it sends messages), nor for a completions API's given ``model.tokenizer``."""
    if config.model.init is None or config.path(config.model.path or ".").joinpath("config.json").exists():
        return False
    if command != "eval":
        return True
    engine = config.engine.name
    return engine not in CHAT_ENGINES and (engine == "transformers" or not config.model.tokenizer)


ModelNeed = Literal["weights", "tokenizer"]


def _model_need(config: RunConfig, command: Command, backend: str) -> ModelNeed | None:
    """What of the model ``command`` reads: training the weights at ``model.path`` (verl fetches its own),
    ``rlf eval`` the tokenizer (none for a chat engine, which sends messages), or like training the model
    ``model.init`` builds; ``rlf config`` as the engine would."""

    if command in ("train", "sft"):
        return "weights" if backend == "local" else None
    if config.engine.name in CHAT_ENGINES:
        return None
    if command == "eval":
        return "weights" if builds_model(config, command) else "tokenizer"
    return "tokenizer" if config.engine.name != "transformers" else "weights"


def model_issue(config: RunConfig, need: ModelNeed) -> ConfigIssue | None:
    """The model a command cannot find, in the same words in every command. ``weights``: a model folder
    at ``model.path`` (``config.json`` in it), or ``model.init`` to build one there, as training needs;
    ``tokenizer``: the folder of ``model.tokenizer`` or ``model.path``, or a hub id in the local Hugging
    Face cache, as ``rlf eval`` needs."""
    key = "model.tokenizer" if need == "tokenizer" and config.model.tokenizer else "model.path"
    value = config.model.tokenizer if key == "model.tokenizer" else config.model.path
    if not value:
        message = "not set: name the folder of a Hugging Face model (weights, tokenizer, chat template)"
        return ConfigIssue(path="model.path", message=message)
    path, hub = config.path(value), _hub_like(value, config.base_dir)
    if need == "weights" and ((path / "config.json").is_file() or config.model.init is not None):
        return None
    if need == "tokenizer" and path.is_dir():
        return None
    if need == "tokenizer" and hub and in_hub_cache(value):
        return None
    typed = Path(value).expanduser().is_absolute()  # a path typed on the command line arrives absolute
    given = (
        f"{value!r}"
        if typed
        else f"{value!r}, read relative to the config's folder (one typed on the command line is not)"
    )
    found = f"{path} holds no model, no config.json ({given})" if path.is_dir() else f"no folder {path} ({given})"
    if key == "model.tokenizer":
        fix = ""
    elif config.model.init is None:
        fix = ", and no model.init to build one there"
    else:  # a checkpoint's folder typed by hand is not one to build
        fix = (
            "" if typed else "; model.init describes one: `rlf train`, `rlf eval` and `rlf init-model CONFIG` build it"
        )
    if hub:
        cache = ", nor a model in the local Hugging Face cache" if need == "tokenizer" else ""
        fix += f"{cache}; rlf downloads no model (a hub id is for --backend verl)"
    return ConfigIssue(path=key, message=found + fix)


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


def _check_chat_engine(config: RunConfig) -> list[ConfigIssue]:
    """Training with a chat engine, which returns text and no token ids (:data:`TRAINING_REFUSED`)."""

    name = config.engine.name
    return [ConfigIssue(path="engine.name", message=TRAINING_REFUSED.format(name=name))] if name in CHAT_ENGINES else []


def _check_agent_engine(config: RunConfig) -> list[ConfigIssue]:
    """An agent with a chat engine: the agent's endpoint serves a token engine, and a chat engine runs
    rlf's own message loop instead, so the agent would silently never run."""
    name = config.engine.name
    if config.agent is None or name not in CHAT_ENGINES:
        return []
    message = (
        f"an agent talks to rlf's endpoint, which serves the policy through a token engine; engine {name!r} "
        "sends messages to another chat API, where the agent would never run: remove `agent` to evaluate "
        "that API with rlf's own loop, or use engine.name transformers (or openai) to run the agent"
    )
    return [ConfigIssue(path="agent", message=message)]


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
