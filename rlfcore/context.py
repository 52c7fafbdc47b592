"""Context objects passed to hooks.

Hooks take a context instead of a long argument list so the core can add fields later without
breaking any plugin: an implementation reads only the attributes it needs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from rlfcore.stash import Stash

if TYPE_CHECKING:
    from pydantic import BaseModel

    from rlfcore.runtime import Runtime
    from rlfcore.schema import RunConfig
    from rlfcore.sessions import OpenSession
    from rlfcore.types import Message, Sample, Tool

T = TypeVar("T")
S = TypeVar("S", bound="BaseModel")


class _Settings:
    """The typed accessor every context has for its ``settings``."""

    settings: BaseModel | None

    def settings_as(self, schema: type[S]) -> S:
        """``settings`` (the calling plugin's own section, always) typed as ``schema``, the model the
        plugin registered; the schema's defaults when the context carries none (one built by hand)."""
        if self.settings is None:
            return schema()
        if not isinstance(self.settings, schema):
            raise TypeError(
                f"ctx.settings is a {type(self.settings).__name__}, not {schema.__name__}: "
                "settings_as takes the schema this plugin's register_config_schema returns"
            )
        return self.settings


@dataclass
class SetupContext(_Settings):
    """For the registration hooks, called once per plugin when a run starts or a command inspects it.

    ``settings`` is the calling plugin's own validated config section (its schema's defaults when the
    config has no section for it, ``None`` when it registers no schema); ``config`` is the whole run
    config, ``None`` outside a run. ``listing`` is true when the call only shows what the plugin
    provides (``rlf plugins list``): skip work that starts processes or loads data, answering what
    is known without it. ``stash`` is the calling plugin's run-scoped store (every context has it:
    the same store in every hook of a run; a fresh one outside a run).
    """

    plugin: str
    settings: BaseModel | None = None
    config: RunConfig | None = None
    listing: bool = False
    runtime: Runtime | None = None
    stash: Stash = field(default_factory=Stash)


@dataclass
class TurnContext(_Settings):
    """For the per-turn hooks of one trajectory.

    ``env`` is the sample's environment, ``settings`` the config section of the plugin whose hook is
    called (``None`` for the built-ins), ``tools`` the tools this sample may call, ``messages`` the conversation so far (this
    turn's assistant message is appended once ``parse_tool_calls`` has answered), ``parser`` the configured tool-call format, ``runtime``
    the run's shared services (executor, parsers, tokenizer) for the built-in implementations.
    ``session`` is what the called plugin's ``open_session`` opened for this trajectory (``None``
    without one); ``sessions`` holds every plugin's, for an ``invoke_tools`` that runs the executor
    itself (``ctx.runtime.executor.run(calls, tools, ctx.sessions)``).
    """

    sample_id: str
    env: str | None
    turn: int
    messages: list[Message]
    tools: Mapping[str, Tool]
    parser: str = "hermes"
    settings: BaseModel | None = None
    config: RunConfig | None = None
    row: Mapping[str, Any] = field(default_factory=dict)
    runtime: Runtime | None = None
    session: Any = None
    sessions: Mapping[str, OpenSession] = field(default_factory=dict)
    stash: Stash = field(default_factory=Stash)


@dataclass
class ScoreContext(_Settings):
    """For the reward hooks. ``group`` holds every sample of the same prompt (GRPO's group);
    ``settings`` is the config section of the plugin whose hook is called. ``judge_endpoints`` are
    OpenAI-compatible base URLs (ending in ``/v1``) of a judge model the trainer itself serves (verl's
    reward router when verl's ``reward.reward_model`` is enabled); empty otherwise."""

    env: str | None
    settings: BaseModel | None = None
    config: RunConfig | None = None
    group: list[Sample] = field(default_factory=list)
    runtime: Runtime | None = None
    judge_endpoints: list[str] = field(default_factory=list)
    stash: Stash = field(default_factory=Stash)

    async def in_process(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` in one of the run's worker processes (``reward.processes``), for
        scoring that would hold the event loop up. ``fn`` must be a module-level function and its
        arguments must pickle. A worker that dies raises :class:`rlfcore.processes.WorkerDied`,
        which the pipeline records on that sample only. Without a runtime (a context built by
        hand in a unit test) it runs in this process."""
        if self.runtime is None:
            return fn(*args, **kwargs)
        return await self.runtime.processes.run(fn, *args, **kwargs)
