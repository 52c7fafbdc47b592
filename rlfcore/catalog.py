"""What each plugin provides (hooks, tools, parsers), for ``rlf plugins list`` and ``check``.

Tools and parsers are found by calling the registration hooks with the plugin's default settings (or
the run config's, when one is given) and ``ctx.listing`` set, so plugins answer without starting
servers or loading data.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlfcore.context import SetupContext
from rlfcore.hookcall import call_impl, run_sync

if TYPE_CHECKING:
    from rlfcore.plugins import PluginInfo, PluginManager
    from rlfcore.schema import RunConfig


def registered(manager: PluginManager, hook: str, name: str, config: RunConfig | None = None) -> Any:
    """Call one registration hook of one plugin and return its answer (``None`` if not implemented)."""
    for impl in manager.impls(hook, [name]):
        if impl.plugin_name != name:
            continue
        ctx = SetupContext(plugin=name, config=config, listing=True)  # hookcall.bind fills in the settings
        return run_sync(call_impl(manager, hook, impl, ctx=ctx))
    return None


def describe(manager: PluginManager, config: RunConfig | None = None) -> list[PluginInfo]:
    """Load every plugin found and fill in what each provides; broken ones keep their error."""
    manager.load_all()
    for info in manager.infos.values():
        if not info.loaded:
            continue
        try:
            info.tools = [t.name for t in registered(manager, "register_tools", info.name, config) or []]
            info.parsers = sorted(registered(manager, "register_parsers", info.name, config) or {})
        except Exception as exc:  # a plugin's registration can fail on defaults; say so, keep listing
            info.error = f"plugin '{info.name}': registering tools or parsers failed: {type(exc).__name__}: {exc}"
    return list(manager.infos.values())
