"""A run's shared services: its config, plugins, tools per environment, parsers and executor.

Built once per process from a validated config; the loop, the reward pipeline and the CLI commands
all reach plugins through it, so routing (which plugins a sample's hooks run on) lives in one place.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable, Mapping

import logging

import pluggy

from rlfcore.context import SetupContext
from rlfcore.hookcall import resolve
from rlfcore.processes import ProcessPool
from rlfcore.types import Example, Tool, ToolCallParser

if TYPE_CHECKING:
    from rlfcore.chat import ChatTokenizer
    from rlfcore.engines.base import Engine
    from rlfcore.config import RunConfig
    from rlfcore.executor import ToolExecutor
    from rlfcore.plugins import PluginManager


log = logging.getLogger(__name__)


class RoutingError(ValueError):
    """A dataset row names an environment the config does not define."""


class Runtime:
    """Everything a run shares across trajectories. Call :meth:`setup` before use."""

    def __init__(self, config: RunConfig, plugins: PluginManager):
        self.config = config
        self.plugins = plugins
        self.parsers: dict[str, ToolCallParser] = {}
        self.tools: dict[str, dict[str, Tool]] = {}
        self.examples: dict[str, list[Example]] = {}
        self.engines: dict[str, Callable[..., Engine]] = {}
        self.processes = ProcessPool(config.reward.processes)
        """Worker processes for CPU-heavy scorers (``ScoreContext.in_process``), started on first use."""
        self.judge_endpoints: list[str] = []
        """Judge servers the trainer runs for this process (verl's reward router), for ``ScoreContext``."""
        self._ready = False
        self._closed = False

    @classmethod
    async def create(cls, config: RunConfig, plugins: PluginManager) -> Runtime:
        runtime = cls(config, plugins)
        await runtime.setup()
        return runtime

    async def setup(self) -> None:
        """Collect what each enabled plugin registers: parsers, tools, examples."""
        if self._ready:
            return
        for impl in self.plugins.impls("register_parsers"):
            found = await resolve(impl.function(*self._setup_args(impl)))
            for name, parser in (found or {}).items():
                self.parsers[name] = parser
        for impl in self.plugins.impls("register_tools"):
            found = await resolve(impl.function(*self._setup_args(impl)))
            tools = self.tools.setdefault(impl.plugin_name, {})
            for tool in found or []:
                if tool.name in tools:
                    raise ValueError(f"plugin '{impl.plugin_name}' registers two tools named '{tool.name}'")
                tool.plugin = impl.plugin_name
                tools[tool.name] = tool
        for impl in self.plugins.impls("register_engines"):
            self.engines.update(impl.function(*self._setup_args(impl)) or {})
        for impl in self.plugins.impls("register_examples"):
            self.examples[impl.plugin_name] = list(impl.function(*self._setup_args(impl)) or [])
        self._ready = True

    async def aclose(self) -> None:
        """Call every plugin's ``shutdown`` once; a failing one is logged, the others still run."""
        if self._closed:
            return
        self._closed = True
        for impl in self.plugins.impls("shutdown"):
            try:
                await resolve(impl.function(*self._setup_args(impl)))
            except Exception:  # one plugin's cleanup must not keep the others' servers alive
                log.exception("plugin '%s' failed to shut down", impl.plugin_name)
        self.processes.close()

    async def __aenter__(self) -> Runtime:
        await self.setup()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _setup_args(self, impl: pluggy.HookImpl) -> list[Any]:
        ctx = SetupContext(plugin=impl.plugin_name, settings=self.config.settings(impl.plugin_name), config=self.config)
        return [ctx for _ in impl.argnames]

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
        """The tools a sample of ``env`` may call: those of the environment's plugins."""
        out: dict[str, Tool] = {}
        for plugin in self.env_plugins(env):
            out.update(self.tools.get(plugin, {}))
        return out

    def impls(self, hook: str, env: str | None) -> list[pluggy.HookImpl]:
        """A routed hook's implementations for a sample of ``env``: its plugins, then the built-ins."""
        return self.plugins.impls(hook, self.env_plugins(env))

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

    def engine(self, tokenizer: ChatTokenizer, name: str | None = None) -> Engine:
        """Build the configured engine (or ``name``) from the factories plugins registered."""
        name = name or self.config.engine.name
        if name not in self.engines:
            raise KeyError(f"no engine named {name!r}; registered: {', '.join(sorted(self.engines))}")
        return self.engines[name](self.config, tokenizer)

    def tokenizer(self) -> ChatTokenizer:
        """The model's tokenizer and chat template (``model.tokenizer`` or ``model.path``)."""
        from rlfcore.chat import load_tokenizer

        path = self.config.model.tokenizer or self.config.model.path
        if not path:
            raise ValueError("the config names no model: set model.path (or model.tokenizer)")
        return load_tokenizer(path, self.config.model.chat_template_kwargs)
