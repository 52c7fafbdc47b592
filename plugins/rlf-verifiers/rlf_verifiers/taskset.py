"""An rlf run config as a verifiers 0.4 environment: the taskset, task, toolset and harness that a package
written by ``rlf verifiers export`` re-exports (docs/verifiers.md, "rlf plugins as a verifiers environment").

The config's rows are the tasks. The tools of its plugins reach the model through :class:`RlfToolset`, a
task-scoped verifiers tool server (verifiers starts one per rollout, as ``python -m rlf_verifiers.taskset``)
that holds an rlf runtime and the row's sessions and calls the tools through rlf's ``invoke_tools``. The
task's one reward, ``rlf``, is rlf's reward pipeline over the finished trace, its components the trace's
metrics. Unlike the rest of the plugin this module imports verifiers at once: only the exported packages
and the tool server import it.
"""

from __future__ import annotations

import asyncio
import atexit
import dataclasses
import hashlib
import inspect
import json
import signal
import sys
import threading
import uuid
from collections.abc import Callable, Coroutine, Mapping
from importlib.util import find_spec
from pathlib import Path
from typing import Any, TypeVar, cast

import verifiers.v1 as vf
from mcp.types import CallToolResult, TextContent
from mcp.types import Tool as MCPTool
from verifiers.v1.harnesses.null import NullHarness
from verifiers.v1.types import content_text

from rlf_verifiers.export import CONFIG_FILE, TASKS_FILE
from rlfcore import Message, RewardPipeline, ToolCall, Trajectory, TurnContext, make_runtime, normalize_row

T = TypeVar("T")

STOP_REASONS = {"max_turns": "max_turns", "max_output_tokens": "max_tokens", "max_total_tokens": "max_total_tokens"}
"""verifiers' length stops as rlf names them; any other end is rlf's ``answer`` (or ``no_tool_call``)."""
PROGRAM_IMPORTS = ("openai", "mcp", "httpx", "httpx2", "tenacity", "certifi")
"""What verifiers' chat program imports (the PEP 723 header of ``verifiers.v1.harnesses.utils.launch``)."""


class Host:
    """An rlf runtime (``make_runtime`` over a run config), driven from verifiers' event loop. The runtime
    runs its phases in a loop of its own, from synchronous code (``Runtime.run``), so each phase runs on a
    worker thread, one at a time; the runtime is built on the first."""

    def __init__(self, config: str, close_at_exit: bool = False) -> None:
        self.config = config
        self.close_at_exit = close_at_exit
        self._runtime: Any = None  # rlfcore's Runtime: made by make_runtime, its class is not public
        self._lock = threading.Lock()

    async def run(self, phase: Callable[[Any], Coroutine[Any, Any, T]]) -> T:
        """``phase(runtime)`` run to its end in the runtime's loop."""
        return await asyncio.to_thread(self._run, phase)

    def _run(self, phase: Callable[[Any], Coroutine[Any, Any, T]]) -> T:
        with self._lock:
            if self._runtime is None:
                self._runtime = make_runtime(self.config)
                if self.close_at_exit:  # registered after the runtime's loop, so run before the loop's own finalizer
                    atexit.register(self.close)
            result: T = self._runtime.run(phase(self._runtime))
            return result

    def close(self) -> None:
        """Shut the plugins down (their servers, pools) and the runtime's loop."""
        with self._lock:
            if self._runtime is not None:
                self._runtime.close()
                self._runtime = None


_SCORERS: dict[str, Host] = {}
"""The eval process's runtime per run config, for scoring: made on first use, closed when the process exits."""


def scorer(config: str) -> Host:
    if config not in _SCORERS:
        _SCORERS[config] = Host(config, close_at_exit=True)
    return _SCORERS[config]


@dataclasses.dataclass(frozen=True)
class Opened:
    """One plugin's session of a rollout, in the shape the executor and the hooks read (``value``, ``key``)."""

    plugin: str
    value: Any
    key: str


async def open_row(runtime: Any, row: dict[str, Any], sample_id: str) -> TurnContext:
    """The turn context of one rollout of ``row``, with the sessions its environment's plugins open for it,
    as rlf's loop opens them before a trajectory's first turn (``open_session``, each plugin with its own
    settings and stash). rlfcore has no public helper for this yet: see docs/verifiers.md."""
    env = runtime.env_of(row)
    ctx = TurnContext(
        sample_id=sample_id,
        env=env,
        turn=0,
        messages=[],
        tools=runtime.callable_tools(env),
        parser=runtime.config.rollout.parser,
        settings=runtime.settings(env),
        config=runtime.config,
        row=row,
        runtime=runtime,
    )
    opened: dict[str, Opened] = {}
    try:
        for impl in runtime.impls("open_session", env):
            plugin = impl.plugin_name
            own = dataclasses.replace(ctx, settings=runtime.config.settings(plugin), stash=runtime.stash(plugin))
            given = {"row": row, "ctx": own}
            value = impl.function(*[given[name] for name in impl.argnames])
            if inspect.isawaitable(value):
                value = await value
            if value is not None:
                opened[plugin] = Opened(plugin, value, f"{sample_id}/{plugin}")
    except BaseException:
        await close_row(opened)
        raise
    ctx.sessions = cast("Any", opened)
    return ctx


async def close_row(sessions: Mapping[str, Any]) -> None:
    """Release the sessions, last opened first (``aclose()`` or ``close()``, sync or async)."""
    for session in reversed(list(sessions.values())):
        close = getattr(session.value, "aclose", None) or getattr(session.value, "close", None)
        if callable(close):
            result = close()
            if inspect.isawaitable(result):
                await result


class RlfData(vf.TaskData):  # type: ignore[misc]  # verifiers is untyped for mypy
    """A task: the rlf row as the config's data file has it (``prompt`` is its prompt as messages)."""

    row: dict[str, Any]


class RlfToolsetConfig(vf.ToolsetConfig):  # type: ignore[misc]
    config: str = ""
    """The rlf run config whose plugins' tools the server offers (set by :class:`RlfTaskset`)."""


class RlfToolset(vf.Toolset[RlfToolsetConfig, vf.State]):  # type: ignore[misc]
    """The listed tools of the row's environment under their rlf names, run by rlf's executor with the row's
    sessions: a failing tool is an error result the model reads, as in rlf's loop."""

    TOOL_PREFIX = None
    """rlf's tool names, unprefixed: the names the model learns and rlf's prompts use."""

    async def setup_task(self, task: RlfData) -> None:
        """Build the rlf runtime and open the row's sessions; both are released when the server stops."""
        # verifiers stops the server with SIGTERM; uvicorn shuts down, then raises the signal again, which would end
        # the process before the server's exit stack closes. Leave through the exit stack instead.
        signal.signal(signal.SIGTERM, _leave)
        self._host = Host(self.config.config)
        self._exit_stack.push_async_callback(asyncio.to_thread, self._host.close)
        sample_id = f"{task.id}#{uuid.uuid4().hex[:8]}"
        self._ctx = await self._host.run(lambda runtime: open_row(runtime, task.row, sample_id))
        self._exit_stack.push_async_callback(self._host.run, lambda _: close_row(self._ctx.sessions))

    def register(self, mcp: Any) -> None:
        """Serve the tools through the server's own handlers (the list is the row's, known once it is set up)."""
        server = cast("Any", mcp)
        server.list_tools = self.list_tools
        server.call_tool = self.call_tool

    async def list_tools(self) -> list[MCPTool]:
        listed = [tool for tool in self._ctx.tools.values() if tool.listed]
        return [MCPTool(name=t.name, description=t.description, input_schema=t.parameters) for t in listed]

    async def call_tool(  # MCPServer.call_tool's signature
        self,
        name: str,
        arguments: dict[str, Any],
        context: Any = None,  # noqa: ARG002
    ) -> CallToolResult:
        call = ToolCall(name=name, arguments=arguments, id=f"call_{uuid.uuid4().hex[:8]}")
        [result] = await self._host.run(
            lambda runtime: runtime.call_first("invoke_tools", self._ctx.env, calls=[call], ctx=self._ctx)
        )
        return CallToolResult(content=[TextContent(type="text", text=result.content)], is_error=not result.ok)


def _leave(signum: int, frame: Any) -> None:  # noqa: ARG001  # a signal handler's signature
    raise SystemExit(0)


class RlfTaskConfig(vf.TaskConfig):  # type: ignore[misc]
    tools: RlfToolsetConfig = RlfToolsetConfig()


class RlfTask(vf.Task[RlfData, vf.State, RlfTaskConfig]):  # type: ignore[misc]
    """One row: the config's tools through :class:`RlfToolset`, and rlf's reward as the reward ``rlf``."""

    @classmethod
    def toolsets(cls, config: RlfTaskConfig) -> list[Any]:
        return [RlfToolset(config.tools)]

    @vf.reward(weight=1.0)  # type: ignore[untyped-decorator]
    async def rlf(self, trace: Any) -> float:
        """rlf's reward of the trace (``reward.weights`` composing its components); each component is a metric
        under its own name. A reward that fails is this trace's scoring error, with rlf's reason."""
        row = self.data.row
        messages = [to_message(m) for m in trace.messages]
        error = trace.last_error
        scored = await scorer(self.config.tools.config).run(
            lambda runtime: score(runtime, row, messages, str(trace.id), trace.stop_condition, error)
        )
        if scored.reward_error is not None:
            raise RuntimeError(f"rlf reward of row {scored.row_id!r}: {scored.reward_error}")
        trace.record_metrics(scored.reward_components)
        return scored.reward


async def score(
    runtime: Any, row: dict[str, Any], messages: list[Message], trace_id: str, stop: str | None, error: Any
) -> Trajectory:
    """The trajectory rlf's loop would have recorded for these messages, scored by rlf's reward pipeline."""
    parsed = normalize_row(dict(row))
    calls = sum(len(m.get("tool_calls") or []) for m in messages)
    stop_reason: Any  # rlfcore's StopReason literal, not public
    if error is not None:
        stop_reason = "error"
    else:
        stop_reason = STOP_REASONS.get(stop or "", "answer" if calls else "no_tool_call")
    traj = Trajectory(
        id=f"{parsed.id}#{trace_id}",
        row_id=parsed.id,
        env=runtime.env_of(row),
        messages=messages,
        ground_truth=parsed.ground_truth,
        extra=parsed.extra,
        num_turns=sum(m["role"] == "assistant" for m in messages),
        tool_calls=calls,
        stop_reason=stop_reason,
        truncated=stop_reason in ("max_tokens", "max_total_tokens"),
        error=None if error is None else str(getattr(error, "message", error)),
    )
    await RewardPipeline(runtime).score([traj])
    return traj


def to_message(message: Any) -> Message:
    """A verifiers message as rlf's loop writes it: text content, tool-call arguments as objects."""
    out: Message = {"role": message.role, "content": content_text(message.content)}
    if message.role == "assistant":
        if message.reasoning_content:
            out["reasoning_content"] = message.reasoning_content
        if message.tool_calls:
            out["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": _arguments(c.arguments)}}
                for c in message.tool_calls
            ]
    elif message.role == "tool":
        out["tool_call_id"] = message.tool_call_id
        if message.name:
            out["name"] = message.name
    return out


def _arguments(raw: str) -> Any:
    try:
        return json.loads(raw or "{}")
    except json.JSONDecodeError:
        return raw  # as the model wrote it: a reward may judge a malformed call


class RlfTasksetConfig(vf.TasksetConfig):  # type: ignore[misc]
    task: RlfTaskConfig = RlfTaskConfig()
    rlf_config: str | None = None
    """Another rlf run config to run the tasks under (default: the one the package was exported with)."""


class RlfTaskset(vf.Taskset[RlfTask, RlfTasksetConfig]):  # type: ignore[misc]
    """The tasks of an exported package: subclassed there, so that its folder (its config and tasks) is the
    folder of the module that defines the subclass."""

    def load(self) -> list[RlfTask]:
        folder = Path(inspect.getfile(type(self))).parent
        tasks = folder / TASKS_FILE
        if not tasks.is_file():
            raise FileNotFoundError(
                f"{type(self).__qualname__}: no {TASKS_FILE} beside {folder} (subclass RlfTaskset in a package "
                "written by `rlf verifiers export`)"
            )
        config = self.config.rlf_config or str(folder / CONFIG_FILE)
        task = self.config.task.model_copy(
            update={"tools": self.config.task.tools.model_copy(update={"config": config})}
        )
        return [RlfTask(RlfData.model_validate_json(line), task) for line in tasks.read_text().splitlines()]


class RlfHarness(NullHarness):  # type: ignore[misc]
    """verifiers' ``null`` harness (its chat loop: the model and the MCP tools, no shell) which, on the host
    (the ``subprocess`` runtime), runs its program with this interpreter rather than in an environment uv
    builds: the program's packages are verifiers' own dependencies, so the eval needs no package index. In
    any other runtime it is the ``null`` harness."""

    async def setup(self, runtime: Any) -> None:
        if runtime.type != "subprocess":
            await super().setup(runtime)
            return
        if missing := [name for name in PROGRAM_IMPORTS if find_spec(name) is None]:
            raise vf.HarnessError(
                f"harness {self.config.id!r}: verifiers' chat program needs {missing}, which {sys.executable} lacks"
            )

    async def launch(self, ctx: Any, trace: Any, runtime: Any, *args: Any, **kwargs: Any) -> Any:
        host = ThisPython(runtime) if runtime.type == "subprocess" else runtime
        return await super().launch(ctx, trace, host, *args, **kwargs)


class ThisPython:
    """A host runtime whose PEP 723 scripts run under this interpreter; all else is the runtime's own."""

    def __init__(self, runtime: Any) -> None:
        self._runtime = runtime

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runtime, name)

    async def prepare_uv_script(  # Runtime.prepare_uv_script's signature; env and activate shape a uv environment
        self,
        script: str | bytes,
        env: Any = None,  # noqa: ARG002
        *,
        activate: bool = True,  # noqa: ARG002
    ) -> list[str]:
        data = script.encode() if isinstance(script, str) else script
        path = f".vf-program-{hashlib.sha256(data).hexdigest()[:16]}.py"  # in the runtime's folder, its cwd
        await self._runtime.write(path, data)
        return [sys.executable, path]


def load_environment(taskset_id: str, args: Mapping[str, Any]) -> Any:
    """The verifiers environment of exported package ``taskset_id``, as ``vf-eval`` builds it, with the agent on
    this host (the ``subprocess`` runtime; verifiers' default is a Prime sandbox); ``args`` are the taskset's
    config fields (``rlf_config``, ``task``...)."""
    config = vf.resolve_env_config(
        {"taskset": {**args, "id": taskset_id}, "agent": {"runtime": {"type": "subprocess"}}}
    )
    return vf.load_environment(config)


if __name__ == "__main__":  # how verifiers starts a rollout's tool server
    RlfToolset.run()
