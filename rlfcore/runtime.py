"""A run's shared services: its config, plugins, tools per environment, parsers and executor.

Built once per process from a validated config; the loop, the reward pipeline and the CLI commands
all reach plugins through it, so routing (which plugins a sample's hooks run on) lives in one place.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable, Coroutine, Mapping
from functools import cached_property, partial
from typing import TYPE_CHECKING, Any, TypeVar

import pluggy

from rlfcore.context import SetupContext
from rlfcore.deadlines import within
from rlfcore.hookcall import Check, call_first, call_impl, call_impl_sync
from rlfcore.paths import in_hub_cache
from rlfcore.processes import ProcessPool
from rlfcore.runloop import RunLoop
from rlfcore.stash import Stash
from rlfcore.types import Example, Tool, ToolCallParser

if TYPE_CHECKING:
    from rlfcore.chat import ChatTokenizer
    from rlfcore.engines.base import Engine
    from rlfcore.executor import ToolExecutor
    from rlfcore.plugins import PluginManager
    from rlfcore.schema import RunConfig


log = logging.getLogger(__name__)

T = TypeVar("T")


class RoutingError(ValueError):
    """A dataset row names an environment the config does not define."""


class Runtime:
    """Everything a run shares across trajectories. Call :meth:`setup` before use."""

    def __init__(self, config: RunConfig, plugins: PluginManager):
        self.config = config
        self.plugins = plugins
        self.parsers: dict[str, ToolCallParser] = {}
        self.tools: dict[str, dict[str, Tool]] = {}
        """Per plugin, the tools listed in the prompt."""
        self.unlisted_tools: dict[str, dict[str, Tool]] = {}
        """Per plugin, the tools the model calls in a format of its own (``Tool.listed`` false)."""
        self.examples: dict[str, list[Example]] = {}
        self.engines: dict[str, Callable[..., Engine]] = {}
        self.processes = ProcessPool(config.reward.processes)
        """Worker processes for CPU-heavy scorers (``ScoreContext.in_process``), started on first use."""
        self.judge_endpoints: list[str] = []
        """Judge servers the trainer runs for this process (verl's reward router), for ``ScoreContext``."""
        self.loop = RunLoop(config.tools.shutdown_timeout_s)
        """The run's one event loop, for synchronous callers (:meth:`open`, :meth:`run`, :meth:`close`)."""
        self._setup_loop: asyncio.AbstractEventLoop | None = None
        self._stashes: dict[str, Stash] = {}
        self._ready = False
        self._closed = False

    @classmethod
    async def create(cls, config: RunConfig, plugins: PluginManager) -> Runtime:
        runtime = cls(config, plugins)
        await runtime.setup()
        return runtime

    # --- one event loop per run ------------------------------------------------------------------

    @classmethod
    def open(cls, config: RunConfig, plugins: PluginManager) -> Runtime:
        """A runtime set up in its own :class:`RunLoop`, for synchronous callers (the trainers, the
        CLI): every later phase goes through :meth:`run` and :meth:`close` ends in that same loop."""
        runtime = cls(config, plugins)
        try:
            runtime.run(runtime.setup())
        except BaseException:
            runtime.close()
            raise
        return runtime

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run one phase (a rollout step, scoring) to its end in the run's loop."""
        if self._setup_loop is not None and not self.loop.holds(self._setup_loop):
            coro.close()
            raise RuntimeError(
                "this runtime was set up in another event loop (Runtime.create): await its coroutines in that "
                "loop, or build it with Runtime.open to run phases from synchronous code"
            )
        return self.loop.run(coro)

    def close(self) -> None:
        """Shut the plugins down in the run's loop (:meth:`aclose`), then close the loop."""
        try:
            if not self._closed:
                self.run(self.aclose())
        finally:
            self.loop.close()

    async def setup(self) -> None:
        """Collect what each enabled plugin registers: parsers, tools, examples."""
        if self._ready:
            return
        self._setup_loop = asyncio.get_running_loop()
        ctx = SetupContext(plugin="", config=self.config, runtime=self)  # rebound to each plugin by hookcall.bind
        for impl in self.plugins.impls("register_parsers"):
            found = await call_impl(self.plugins, "register_parsers", impl, ctx=ctx)
            for name, parser in (found or {}).items():
                self.parsers[name] = parser
        for impl in self.plugins.impls("register_tools"):
            found = await call_impl(self.plugins, "register_tools", impl, ctx=ctx)
            tools = self.tools.setdefault(impl.plugin_name, {})
            unlisted = self.unlisted_tools.setdefault(impl.plugin_name, {})
            for tool in found or []:
                if tool.name in tools or tool.name in unlisted:
                    raise ValueError(f"plugin '{impl.plugin_name}' registers two tools named '{tool.name}'")
                tool.plugin = impl.plugin_name
                (tools if tool.listed else unlisted)[tool.name] = tool
        for impl in self.plugins.impls("register_engines"):
            self.engines.update(await call_impl(self.plugins, "register_engines", impl, ctx=ctx) or {})
        for impl in self.plugins.impls("register_examples"):
            self.examples[impl.plugin_name] = list(
                await call_impl(self.plugins, "register_examples", impl, ctx=ctx) or []
            )
        self._ready = True

    async def aclose(self) -> None:
        """Call every plugin's ``shutdown`` once (each with its stash), then drop the stashes; one that
        fails, or that runs past ``tools.shutdown_timeout_s``, is logged, and the others still run.
        Past its deadline an ``async def`` shutdown is cancelled; a plain ``def`` one runs in a thread
        of its own (as a plain opener does), which cannot be stopped, so it is left running."""
        if self._closed:
            return
        self._closed = True
        ctx = SetupContext(plugin="", config=self.config, runtime=self)
        timeout_s = self.config.tools.shutdown_timeout_s
        for impl in self.plugins.impls("shutdown"):
            plugin = impl.plugin_name
            plain = not inspect.iscoroutinefunction(impl.function)
            try:
                await within(
                    timeout_s,
                    partial(call_impl_sync, self.plugins, "shutdown", impl, ctx=ctx),
                    what=f"plugin '{plugin}': shutdown",
                    in_thread=plain,
                )
            except asyncio.TimeoutError:
                log.warning(
                    "plugin '%s': shutdown did not return within tools.shutdown_timeout_s (%g s); %s, and what it "
                    "had not released yet may be left running",
                    plugin,
                    timeout_s,
                    "a plain def, in a thread of its own; threads cannot be killed: abandoned"
                    if plain
                    else "cancelled",
                )
            except Exception:  # one plugin's cleanup must not keep the others' servers alive
                log.exception("plugin '%s' failed to shut down", plugin)
        self._stashes.clear()
        self.processes.close()

    def stash(self, plugin: str) -> Stash:
        """``plugin``'s run-scoped store (``ctx.stash`` in its hooks), made on first use."""
        if plugin not in self._stashes:
            self._stashes[plugin] = Stash()
        return self._stashes[plugin]

    async def __aenter__(self) -> Runtime:
        await self.setup()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # --- routing ---------------------------------------------------------------------------------

    @cached_property
    def environments(self) -> dict[str, list[str]]:
        return self.config.environments()

    def env_of(self, row: Mapping[str, Any]) -> str | None:
        """The environment a dataset row names (``env``, or verl's ``data_source``), else the default."""
        env = row.get("env") or row.get("data_source") or self.config.data.default_env
        if env is None and len(self.environments) == 1:
            env = next(iter(self.environments))
        if env is None and len(self.environments) > 1:
            raise RoutingError(
                f"row {row.get('id', '?')!r} names no environment and there are several "
                f"({', '.join(self.environments)}): set the row's env or data.default_env"
            )
        if env is not None and env not in self.environments:
            known = ", ".join(self.environments) or "none (enable a plugin)"
            raise RoutingError(f"row {row.get('id', '?')!r} names environment {env!r}; known: {known}")
        return env

    def env_plugins(self, env: str | None) -> list[str]:
        return self.environments.get(env, []) if env is not None else []

    def tools_for(self, env: str | None) -> dict[str, Tool]:
        """The tools a sample of ``env`` is told about: the listed ones of the environment's plugins."""
        out: dict[str, Tool] = {}
        for plugin in self.env_plugins(env):
            out.update(self.tools.get(plugin, {}))
        return out

    def callable_tools(self, env: str | None) -> dict[str, Tool]:
        """The tools a sample of ``env`` may call: the listed ones and those called in a format of their own."""
        out: dict[str, Tool] = {}
        for plugin in self.env_plugins(env):
            out.update(self.tools.get(plugin, {}))
            out.update(self.unlisted_tools.get(plugin, {}))
        return out

    def impls(self, hook: str, env: str | None) -> list[pluggy.HookImpl]:
        """A routed hook's implementations for a sample of ``env``: its plugins, then the built-ins."""
        return self.plugins.impls(hook, self.env_plugins(env))

    async def call_first(self, hook: str, env: str | None, *, check: Check | None = None, **kwargs: Any) -> Any:
        """A routed first-result hook for a sample of ``env``: the first answer, through ``hookcall``."""
        return await call_first(self.plugins, hook, self.impls(hook, env), check=check, **kwargs)

    def settings(self, env: str | None) -> Any:
        plugins = self.env_plugins(env)
        return self.config.settings(plugins[0]) if plugins else None

    @cached_property
    def executor(self) -> ToolExecutor:
        from rlfcore.executor import ToolExecutor

        return ToolExecutor(self.config.tools)

    def parser(self, name: str) -> ToolCallParser:
        if name not in self.parsers:
            raise KeyError(f"no tool-call parser named {name!r}; registered: {', '.join(sorted(self.parsers))}")
        return self.parsers[name]

    def engine(self, tokenizer: ChatTokenizer | None, name: str | None = None) -> Engine:
        """Build the configured engine (or ``name``) from the factories plugins registered; a chat engine
        (which sends messages, not token ids) gets no tokenizer."""
        name = name or self.config.engine.name
        if name not in self.engines:
            raise KeyError(f"no engine named {name!r}; registered: {', '.join(sorted(self.engines))}")
        return self.engines[name](self.config, tokenizer)

    def tokenizer(self) -> ChatTokenizer:
        """The model's tokenizer and chat template (``model.tokenizer`` or ``model.path``)."""
        from rlfcore.chat import load_tokenizer

        return load_tokenizer(model_source(self.config), self.config.model.chat_template_kwargs)


def model_source(config: RunConfig) -> str:
    """The folder (or cached hub id) the tokenizer loads from: ``model.tokenizer`` or ``model.path``.

    Called before a run starts anything (MCP servers, workers), so a missing model is a config error
    naming the setting, in the words every command's check uses (:func:`rlfcore.config.model_issue`).
    """
    from rlfcore.config import model_issue
    from rlfcore.schema import ConfigError

    source = config.model.tokenizer or config.model.path
    if source and config.path(source).is_dir():
        return str(config.path(source))
    if source and in_hub_cache(source):
        return source
    issue = model_issue(config, "tokenizer")
    assert issue is not None  # it finds a model exactly where the two lines above do
    raise ConfigError([issue], source=str(config.source) if config.source else "config")
