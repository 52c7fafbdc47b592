"""What each plugin provides (hooks, tools, parsers), for ``rlf plugins list`` and ``check``.

Tools and parsers are found by calling the registration hooks with the plugin's default settings (or
the run config's, when one is given) and ``ctx.listing`` set, so plugins answer without starting
servers or loading data. Commands come from ``register_commands`` of the installed plugins, checked
against the core's and each other's names (:func:`gather_commands`, which ``rlf`` starts with too).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

import click

from rlfcore.context import SetupContext
from rlfcore.hookcall import call_impl, call_impl_sync, run_sync
from rlfcore.plugins import PluginError

if TYPE_CHECKING:
    from rlfcore.plugins import PluginInfo, PluginManager
    from rlfcore.schema import RunConfig

COMMAND_NAME = re.compile(r"[a-z0-9][a-z0-9_-]*")
"""A plugin command's name: one word as a shell and ``rlf --help`` show it."""


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


def plugin_commands(manager: PluginManager, name: str) -> dict[str, click.Command]:
    """Plugin ``name``'s ``register_commands`` answer, checked to be ``{name: click command}``."""
    for impl in manager.impls("register_commands", [name]):
        if impl.plugin_name != name:
            continue
        answer = call_impl_sync(manager, "register_commands", impl)
        if answer is None:
            return {}
        if not isinstance(answer, Mapping) or not all(
            isinstance(k, str) and COMMAND_NAME.fullmatch(k) and isinstance(v, click.Command) for k, v in answer.items()
        ):
            raise PluginError(
                f"plugin '{name}': register_commands returned {answer!r}; it must return "
                "{name: click command or group}, each name one lower-case word",
                plugin=name,
            )
        return dict(answer)
    return {}


def gather_commands(manager: PluginManager, core: Collection[str]) -> dict[str, click.Command]:
    """The commands the loaded installed plugins add to ``rlf``, by name, in the order found.

    A name in ``core`` or already added by an earlier plugin is refused, and a plugin whose hook
    raises adds nothing: each reason goes to that plugin's ``command_errors`` (the plugin still runs;
    only its commands are missing), and every other plugin's commands are kept."""
    found: dict[str, click.Command] = {}
    owner: dict[str, str] = {}
    for info in manager.infos.values():
        if info.source != "entrypoint" or not info.loaded:
            continue
        info.commands, info.command_errors = [], []
        try:
            answer = plugin_commands(manager, info.name)
        except PluginError as exc:
            info.command_errors.append(str(exc))
            continue
        except Exception as exc:  # a plugin's hook may fail in any way; the others' commands stay
            info.command_errors.append(f"plugin '{info.name}': register_commands failed: {type(exc).__name__}: {exc}")
            continue
        for name, command in answer.items():
            if name in core:
                info.command_errors.append(
                    f"plugin '{info.name}': command '{name}' refused: `rlf {name}` is a core command; rename it"
                )
            elif name in owner:
                info.command_errors.append(
                    f"plugin '{info.name}': command '{name}' refused: plugin '{owner[name]}' already adds "
                    f"`rlf {name}`; rename one of them or uninstall one"
                )
            else:
                found[name], owner[name] = command, info.name
                info.commands.append(name)
    return found
