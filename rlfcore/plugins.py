"""Finding, loading and enabling plugins.

Installed plugins are found through the entry-point group ``rlf``; the entry-point name is the name a
config enables. Built-in defaults are ordinary plugins registered in-process. Finding a plugin imports
nothing; loading imports it and registers its hook implementations; only enabled plugins are loaded
for a run (``rlf plugins list`` loads all of them to show what they provide).
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import os
import site
import sys
import traceback
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

import pluggy

from rlfcore import hookspecs
from rlfcore.hooktrace import ENV_TRACE, trace_hook_calls
from rlfcore.paths import resolve_path
from rlfcore.schema import RunConfig

ENTRY_POINT_GROUP = "rlf"
ENV_DISABLE_AUTOLOAD = "RLF_DISABLE_PLUGIN_AUTOLOAD"
"""Set to a non-empty value to ignore installed plugins: only built-ins and local plugins load."""
ENV_PLUGINS = "RLF_PLUGINS"
"""Comma-separated names: only these installed plugins are found (empty: none)."""

BUILTINS: dict[str, str] = {
    "rlf.parsers": "rlfcore.builtins.parsers",
    "rlf.family_parsers": "rlfcore.builtins.family_parsers",
    "rlf.executor": "rlfcore.builtins.executor",
    "rlf.observation": "rlfcore.builtins.observation",
    "rlf.scoring": "rlfcore.builtins.scoring",
    "rlf.engines": "rlfcore.builtins.engines",
}

Source = Literal["builtin", "entrypoint", "local"]


class PluginError(Exception):
    """A plugin could not be found, loaded or registered. The message names the plugin."""

    def __init__(self, message: str, *, plugin: str | None = None, details: str | None = None):
        super().__init__(message)
        self.plugin = plugin
        self.details = details


@dataclass
class PluginInfo:
    """What is known of one plugin, loaded or not."""

    name: str
    source: Source
    target: str
    distribution: str | None = None
    version: str | None = None
    enabled: bool = False
    loaded: bool = False
    error: str | None = None
    traceback: str | None = None
    hooks: list[str] = field(default_factory=list)
    tools: list[str] = field(default_factory=list)
    parsers: list[str] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)
    command_errors: list[str] = field(default_factory=list)
    """Why commands of ``register_commands`` were left out of ``rlf``; the plugin itself still runs."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "distribution": self.distribution,
            "source": self.source,
            "target": self.target,
            "hooks": self.hooks,
            "tools": self.tools,
            "parsers": self.parsers,
            "commands": self.commands,
            "command_errors": self.command_errors,
            "enabled": self.enabled,
            "error": self.error,
        }


def _check_not_core(name: str, what: str, fix: str) -> None:
    """A plugin's settings are the config section of its name: one named like a core section would
    take that section (``engine:``) over."""
    if name in RunConfig.model_fields:
        raise PluginError(
            f"{what} is named '{name}', like the core section `{name}:` of the config; {fix}", plugin=name
        )


def _suggest(name: str, candidates: list[str] | tuple[str, ...]) -> str:
    close = difflib.get_close_matches(name, list(candidates), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


_TAKEN_IN: set[Path] = set()
"""The ``.pth`` files :func:`_take_in_install` ran: each once a process."""


def _take_in_install(ep: metadata.EntryPoint) -> None:
    """Make a distribution installed while this process runs (``rlf ui``) importable as a restart would,
    when its entry point is found but its package is not: the import system's caches of folders are
    dropped, and the ``.pth`` files the distribution installed (an editable install's finder or folder),
    which the interpreter runs only at start-up, are run."""
    importlib.invalidate_caches()
    dist = ep.dist
    if dist is None:
        return
    for file in dist.files or []:
        path = Path(str(dist.locate_file(file)))
        if file.suffix == ".pth" and len(file.parts) == 1 and path not in _TAKEN_IN and path.is_file():
            _TAKEN_IN.add(path)
            site.addpackage(str(path.parent), path.name, None)


class PluginManager:
    """rlf's view of pluggy's manager: discovery by entry point, loading with clear errors, routing."""

    def __init__(self) -> None:
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        if os.environ.get(ENV_TRACE, "0") not in ("", "0"):
            trace_hook_calls(self.pm)
        self.infos: dict[str, PluginInfo] = {}
        self._entry_points: dict[str, metadata.EntryPoint] = {}
        self._routed: dict[tuple[str, tuple[str, ...]], tuple[list[pluggy.HookImpl], list[pluggy.HookImpl]]] = {}

    # --- discovery -------------------------------------------------------------------------------

    def discover(self, *, builtins: bool = True) -> None:
        """Register the built-ins and find installed plugins (without importing them).

        The entry points are read afresh, the import system's caches of folders dropped first: a
        long-lived process (``rlf ui``) finds a plugin installed after it started without a restart
        (:func:`_take_in_install` makes its package importable). ``builtins=False`` finds only the
        installed plugins: ``rlf``'s start-up, which asks them for commands, then skips importing the
        core's executor, parsers and engines."""
        for name, module in BUILTINS.items() if builtins else ():
            self._add(PluginInfo(name=name, source="builtin", target=module, enabled=True))
            self.load(name)
        if os.environ.get(ENV_DISABLE_AUTOLOAD):
            return
        importlib.invalidate_caches()  # a folder's listing is cached by its mtime, which ticks coarsely
        chosen = os.environ.get(ENV_PLUGINS)
        wanted = None if chosen is None else {n.strip() for n in chosen.split(",") if n.strip()}
        for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
            if wanted is not None and ep.name not in wanted:
                continue
            dist = getattr(ep, "dist", None)
            info = PluginInfo(
                name=ep.name,
                source="entrypoint",
                target=ep.value,
                distribution=dist.metadata["Name"] if dist else None,
                version=dist.version if dist else None,
            )
            if ep.name in self.infos:
                other = self.infos[ep.name]
                raise PluginError(
                    f"two plugins are named '{ep.name}': {other.target} ({other.distribution or other.source}) "
                    f"and {ep.value} ({info.distribution}); uninstall one of them",
                    plugin=ep.name,
                )
            self._entry_points[ep.name] = ep
            self._add(info)

    def add_local(self, spec: str, base_dir: Path | None = None) -> str:
        """Add a local plugin from ``module``, ``module:attr`` or a ``.py`` path; return its name."""
        module_part, _, attr = spec.partition(":") if not spec.endswith(".py") else (spec, "", "")
        if module_part.endswith(".py"):
            path = resolve_path(module_part, base_dir) if base_dir is not None else Path(module_part)
            name = path.stem
            target = str(path)
        else:
            name = attr or module_part.rsplit(".", 1)[-1]
            target = spec
        if name in self.infos:
            raise PluginError(
                f"local plugin {spec!r} is named '{name}', which is already taken by {self.infos[name].target}",
                plugin=name,
            )
        _check_not_core(
            name, f"local plugin {spec!r}", "rename the file" if spec.endswith(".py") else "name it with module:attr"
        )
        self._add(PluginInfo(name=name, source="local", target=target, enabled=True))
        return name

    def register_object(self, name: str, obj: Any) -> None:
        """Register an in-memory plugin object as a local plugin (tests, notebooks); a config enables it."""
        if name in self.infos:
            raise PluginError(f"a plugin named '{name}' is already known ({self.infos[name].target})", plugin=name)
        _check_not_core(name, "a plugin", "choose another name")
        self._check_hook_names(name, obj)
        self.pm.register(obj, name=name)
        info = PluginInfo(name=name, source="local", target=f"<object {type(obj).__name__}>", loaded=True)
        info.hooks = sorted(c.name for c in self.pm.get_hookcallers(obj) or [])
        self._add(info)

    def unregister(self, name: str) -> None:
        """Remove a plugin registered in this process."""
        if self.pm.get_plugin(name) is not None:
            self.pm.unregister(name=name)
        self.infos.pop(name, None)

    def _add(self, info: PluginInfo) -> None:
        self.infos[info.name] = info

    # --- loading ---------------------------------------------------------------------------------

    def load(self, name: str) -> Any:
        """Import and register one plugin. Failures are kept on its info and raised as PluginError."""
        info = self.infos.get(name)
        if info is None:
            raise PluginError(f"no plugin named '{name}' is installed{_suggest(name, list(self.infos))}", plugin=name)
        if info.loaded:
            return self.pm.get_plugin(name)
        if info.error:
            raise PluginError(info.error, plugin=name, details=info.traceback)
        try:
            obj = self._import(info)
        except Exception as exc:  # a plugin's import may fail in any way; report it, keep the others
            where = f"distribution {info.distribution} {info.version}" if info.distribution else info.target
            info.error = f"plugin '{name}' ({where}) failed to load: {type(exc).__name__}: {exc}"
            info.traceback = traceback.format_exc()
            raise PluginError(info.error, plugin=name, details=info.traceback) from exc
        try:
            self._check_hook_names(name, obj)
            self.pm.register(obj, name=name)
        except (PluginError, pluggy.PluginValidationError, ValueError) as exc:
            info.error = str(exc) if isinstance(exc, PluginError) else f"plugin '{name}': {exc}"
            raise PluginError(info.error, plugin=name) from exc
        info.loaded = True
        info.hooks = sorted(c.name for c in self.pm.get_hookcallers(obj) or [])
        return obj

    def _import(self, info: PluginInfo) -> Any:
        if info.source == "entrypoint":
            ep = self._entry_points[info.name]
            try:
                return ep.load()
            except ModuleNotFoundError as exc:
                if exc.name != ep.module.partition(".")[0]:
                    raise  # the package is there; something it imports is missing
                _take_in_install(ep)
                return ep.load()
        if info.source == "local" and info.target.endswith(".py"):
            path = Path(info.target)
            if not path.exists():
                raise FileNotFoundError(f"no such file: {path}")
            mod_name = f"rlf_local_{info.name}"
            spec = importlib.util.spec_from_file_location(mod_name, path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[mod_name] = module
            spec.loader.exec_module(module)
            return module
        module_name, _, attr = info.target.partition(":")
        obj: Any = importlib.import_module(module_name)
        for part in filter(None, attr.split(".")):
            obj = getattr(obj, part)
        return obj

    def _check_hook_names(self, name: str, obj: Any) -> None:
        """A misspelt hook would otherwise be silently ignored: name the plugin and the hook."""
        for attr in dir(obj):
            try:
                opts = self.pm.parse_hookimpl_opts(obj, attr)
            except Exception:
                continue
            if opts is not None and not opts.get("optionalhook") and attr not in hookspecs.HOOK_NAMES:
                raise PluginError(
                    f"plugin '{name}' implements '{attr}', which is not an rlf hook"
                    f"{_suggest(attr, hookspecs.HOOK_NAMES)}",
                    plugin=name,
                )

    def enable(self, names: list[str]) -> None:
        """Load and enable the named plugins; raise one PluginError listing every failure."""
        errors: list[PluginError] = []
        for name in names:
            try:
                self.load(name)
                self.infos[name].enabled = True
            except PluginError as exc:
                errors.append(exc)
        if errors:
            if len(errors) == 1:
                raise errors[0]
            raise PluginError("\n".join(str(e) for e in errors), details="\n".join(e.details or "" for e in errors))
        self.pm.check_pending()

    def load_all(self) -> None:
        """Load every plugin found, keeping failures on their infos (for listing)."""
        for name in list(self.infos):
            try:
                self.load(name)
            except PluginError:
                pass

    # --- queries ---------------------------------------------------------------------------------

    @property
    def enabled(self) -> list[str]:
        return [n for n, i in self.infos.items() if i.enabled and i.source != "builtin"]

    def plugin(self, name: str) -> Any:
        return self.pm.get_plugin(name)

    def impls(self, hook: str, plugins: list[str] | None = None) -> list[pluggy.HookImpl]:
        """The implementations of a hook in call order, limited to ``plugins`` and the built-ins.

        Wrappers are not among them: ``hookcall`` runs the enabled plugins' wrappers around each one."""
        registered = getattr(self.pm.hook, hook).get_hookimpls()
        if plugins is None:
            return [
                i
                for i in reversed(registered)
                if not (i.wrapper or i.hookwrapper) and self._enabled_name(i.plugin_name)
            ]
        # The loop asks three times a turn: a routed answer is kept while the hook's implementations
        # are the same objects (a plugin's source, which the filter also reads, is fixed for its name).
        key = (hook, tuple(plugins))
        known = self._routed.get(key)
        if known is not None and known[0] == registered:
            return list(known[1])
        impls = [i for i in reversed(registered) if not (i.wrapper or i.hookwrapper)]
        allowed = set(plugins)
        routed = [i for i in impls if i.plugin_name in allowed or self.infos[i.plugin_name].source == "builtin"]
        self._routed[key] = (registered, routed)
        return list(routed)

    def wrappers(self, hook: str) -> list[pluggy.HookImpl]:
        """The enabled plugins' wrappers of a hook (``wrapper=True`` or ``hookwrapper=True``)."""
        impls = getattr(self.pm.hook, hook).get_hookimpls()
        return [i for i in impls if (i.wrapper or i.hookwrapper) and self._enabled_name(i.plugin_name)]

    def _enabled_name(self, name: str) -> bool:
        info = self.infos.get(name)
        return bool(info and info.enabled)
