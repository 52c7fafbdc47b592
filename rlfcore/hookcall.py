"""The one place the core calls hook implementations: through pluggy, by the rules in ``hookspecs``.

Each implementation is one pluggy call (a subset hook caller holding it and the enabled plugins'
wrappers), so hook wrappers and pluggy's call monitoring (``RLF_TRACE_PLUGINS``) see every answer
with the plugin that gave it; where neither is there, the implementation is called as pluggy would
call it, without pluggy's machinery around it (the loop calls three hooks a turn). Meanwhile the
core keeps what pluggy cannot do for an ``async def`` implementation: await it, and only then
decide whether a *first result* hook has its answer.

The binding rule: a caller passes every argument of the spec by keyword; an implementation receives
the subset it names (pluggy's rule); a ``ctx`` reaches it rebound to the implementing plugin (a
``SetupContext``'s ``plugin``), that plugin's settings and run-scoped stash and, on a
``TurnContext``, its session. The sync rule: an implementation of a hook
whose spec says ``may_be_async=False`` that answers with an awaitable is a :class:`HookCallError`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pluggy
from cachetools import LRUCache
from pydantic import BaseModel

from rlfcore.context import SetupContext
from rlfcore.hookspecs import RULES

if TYPE_CHECKING:
    from rlfcore.plugins import PluginManager

Check = Callable[[str, Any], None]
"""Called with ``(plugin, answer)`` on each non-``None`` answer kept; raises to reject it."""


class HookCallError(TypeError):
    """A hook was called or answered against its spec's rule. The message names plugin and hook."""


async def resolve(value: Any) -> Any:
    """Await ``value`` if it is awaitable."""
    if inspect.isawaitable(value):
        return await value
    return value


def _check_arguments(manager: PluginManager, hook: str, kwargs: dict[str, Any]) -> None:
    spec = getattr(manager.pm.hook, hook).spec
    expected = set(spec.argnames) if spec is not None else set()
    if kwargs.keys() != expected:
        missing, extra = sorted(expected - set(kwargs)), sorted(set(kwargs) - expected)
        raise HookCallError(
            f"hook {hook} called with the wrong arguments (missing: {', '.join(missing) or 'none'}; "
            f"unknown: {', '.join(extra) or 'none'}); its spec takes {', '.join(sorted(expected))}"
        )


def config_schema(manager: PluginManager, plugin: str) -> type[BaseModel] | None:
    """The model of ``plugin``'s config section, from its ``register_config_schema`` (``None``
    without one): the one place the schema is asked for, by config loading and by :func:`bind`."""
    for impl in manager.impls("register_config_schema", [plugin]):
        if impl.plugin_name == plugin:
            schema: type[BaseModel] | None = call_impl_sync(manager, "register_config_schema", impl)
            return schema
    return None


def default_settings(manager: PluginManager, plugin: str) -> BaseModel | None:
    """``plugin``'s config section filled with its schema's defaults (``None`` without a schema)."""
    schema = config_schema(manager, plugin)
    return schema.model_validate({}) if schema is not None else None


def _settings(manager: PluginManager, plugin: str, config: Any) -> Any:
    """The plugin's section of ``config``, else its schema's defaults (``None`` without a schema)."""
    own = config.settings(plugin) if config is not None else None
    return own if own is not None else default_settings(manager, plugin)


def bind(manager: PluginManager, plugin: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with ``ctx`` rebound to ``plugin``: its name on a setup context, its settings and
    stash on any, its trajectory session on a turn context."""
    ctx = kwargs.get("ctx")
    runtime = getattr(ctx, "runtime", None)
    if isinstance(ctx, SetupContext):
        stash = runtime.stash(plugin) if runtime is not None else ctx.stash
        if ctx.plugin == plugin and ctx.settings is not None and ctx.stash is stash:
            return kwargs
        return {
            **kwargs,
            "ctx": dataclasses.replace(
                ctx, plugin=plugin, settings=_settings(manager, plugin, ctx.config), stash=stash
            ),
        }
    if ctx is not None and runtime is not None:
        changes: dict[str, Any] = {}
        own = runtime.config.settings(plugin)
        if own is not ctx.settings:
            changes["settings"] = own
        stash = runtime.stash(plugin)
        if ctx.stash is not stash:
            changes["stash"] = stash
        sessions = getattr(ctx, "sessions", None)
        if sessions is not None:
            opened = sessions.get(plugin)
            session = opened.value if opened is not None else None
            if session is not ctx.session:
                changes["session"] = session
        if changes:
            return {**kwargs, "ctx": _replace(ctx, changes)}
    return kwargs


def _replace(ctx: Any, changes: dict[str, Any]) -> Any:
    """``dataclasses.replace(ctx, **changes)``, at the cost of a dict copy where that is the same
    thing: a context class whose fields all go through ``__init__`` and that has no ``__post_init__``
    (the core's). Rebinding happens on every hook call of every turn."""
    if not _plain_dataclass(type(ctx)):
        return dataclasses.replace(ctx, **changes)
    new = object.__new__(type(ctx))
    new.__dict__.update(ctx.__dict__)
    new.__dict__.update(changes)
    return new


_PLAIN_DATACLASSES: dict[type, bool] = {}


def _plain_dataclass(cls: type) -> bool:
    plain = _PLAIN_DATACLASSES.get(cls)
    if plain is None:
        plain = _PLAIN_DATACLASSES[cls] = (
            not hasattr(cls, "__post_init__")
            and "__slots__" not in cls.__dict__
            and all(f.init for f in dataclasses.fields(cls))
        )
    return plain


def _pluggy_call() -> Any:
    """pluggy's own execution of a hook call, which a monitor (``RLF_TRACE_PLUGINS``, pluggy's
    tracing) replaces; ``None`` in a pluggy laid out otherwise (every call then goes through pluggy)."""
    try:
        from pluggy import _callers
    except ImportError:
        return None
    return getattr(_callers, "_multicall", None)


_PLUGGY_CALL = _pluggy_call()

_CALLERS: weakref.WeakKeyDictionary[PluginManager, LRUCache[Any, pluggy.HookCaller]] = weakref.WeakKeyDictionary()
_CALLERS_LOCK = threading.Lock()  # hooks are called from worker threads too (open_session)
_MAX_CALLERS = 4096


def _caller(
    manager: PluginManager, hook: str, impl: pluggy.HookImpl, wrappers: list[pluggy.HookImpl]
) -> pluggy.HookCaller:
    """A pluggy hook caller that runs ``impl`` and ``wrappers`` (the enabled plugins'), nothing else.

    Made once per hook, implementation and set of wrappers (the ``_MAX_CALLERS`` used last are kept):
    pluggy's subset caller walks every registered plugin to be made. The key holds the hook's
    implementations as they are now, so a plugin registered or unregistered later gets a caller of its own."""
    key = (hook, impl, tuple(wrappers), tuple(getattr(manager.pm.hook, hook).get_hookimpls()))
    with _CALLERS_LOCK:
        callers = _CALLERS.get(manager)
        if callers is None:
            callers = _CALLERS[manager] = LRUCache(maxsize=_MAX_CALLERS)
        try:
            return callers[key]  # not .get, which looks the key up twice
        except KeyError:
            pass
        keep = {impl.plugin} | {w.plugin for w in wrappers}
        caller = callers[key] = manager.pm.subset_hook_caller(
            hook, [p for p in manager.pm.get_plugins() if p not in keep]
        )
    return caller


def call_impl_sync(manager: PluginManager, hook: str, impl: pluggy.HookImpl, **kwargs: Any) -> Any:
    """One implementation's answer, through pluggy; an awaitable from a sync-only hook is an error."""
    _check_arguments(manager, hook, kwargs)
    bound = bind(manager, impl.plugin_name, kwargs)
    wrappers = manager.wrappers(hook)
    if not wrappers and _PLUGGY_CALL is not None and getattr(manager.pm, "_inner_hookexec", None) is _PLUGGY_CALL:
        # What pluggy would do, and all it would do: nothing wraps or watches the call.
        answer = impl.function(*[bound[name] for name in impl.argnames])
    else:
        answer = _caller(manager, hook, impl, wrappers)(**bound)
        if not RULES[hook].firstresult:  # pluggy's collect-all answer: a list, without the None
            answer = answer[0] if answer else None
    if inspect.isawaitable(answer) and not RULES[hook].may_be_async:
        close = getattr(answer, "close", None)
        if close is not None:
            close()  # never awaited: say so here rather than in a RuntimeWarning
        raise HookCallError(f"plugin '{impl.plugin_name}': {hook} may not be async (the core calls it synchronously)")
    return answer


async def call_impl(manager: PluginManager, hook: str, impl: pluggy.HookImpl, **kwargs: Any) -> Any:
    """One implementation's answer, awaited when its hook may be async."""
    return await resolve(call_impl_sync(manager, hook, impl, **kwargs))


async def call_first(
    manager: PluginManager, hook: str, impls: list[pluggy.HookImpl], /, *, check: Check | None = None, **kwargs: Any
) -> Any:
    """The first non-``None`` answer of ``impls`` (in call order), or ``None``; ``check`` vets it."""
    for impl in impls:
        answer = call_impl_sync(manager, hook, impl, **kwargs)
        if inspect.isawaitable(answer):  # awaited here, not through call_impl: two coroutines less a call
            answer = await answer
        if answer is not None:
            if check is not None:
                check(impl.plugin_name, answer)
            return answer
    return None


async def call_all(
    manager: PluginManager, hook: str, impls: list[pluggy.HookImpl], /, *, check: Check | None = None, **kwargs: Any
) -> list[tuple[str, Any]]:
    """Every non-``None`` answer as ``(plugin name, answer)``, implementations run concurrently."""
    answers = await asyncio.gather(*(call_impl(manager, hook, impl, **kwargs) for impl in impls))
    out = [(impl.plugin_name, a) for impl, a in zip(impls, answers) if a is not None]
    if check is not None:
        for plugin, answer in out:
            check(plugin, answer)
    return out


def run_sync(coro: Any) -> Any:
    """Run a coroutine from synchronous code (the CLI), or return a plain value as it is."""
    if inspect.isawaitable(coro):
        return asyncio.run(_wrap(coro))
    return coro


async def _wrap(awaitable: Any) -> Any:
    return await awaitable
