"""verifiers 0.4 on one side, rlf on the other: load an environment, turn its tasks into rows, its
toolsets into tools and a finished trajectory into the trace its task scores.

rlf's loop plays the harness: the model's tokens, chat template and tool-call format are rlf's, the
toolsets run in rlf's process (one instance per trajectory for a task's toolsets, one per run for a
taskset's), and the task's ``@vf.reward``/``@vf.metric`` functions score a :class:`verifiers.v1.Trace`
built from the trajectory's messages. An environment with its own ``Env.run()`` (a game engine answering
each move) plays each trajectory against rlf's loop through an :class:`Exchange`. What needs a verifiers
runtime (a container, a harness program, a second agent) is refused with :class:`Unsupported`, naming what.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from importlib import import_module
from importlib.metadata import PackageNotFoundError, version
from types import ModuleType
from typing import Any

from rlfcore import Message, Score

SUPPORTED = "0.4."
INSTALL = "pip install 'verifiers==0.4.0' (or rlf-verifiers[verifiers])"
RESERVED = ("score", "verified", "judge")
"""rlf's own reward component names (docs/config.md#rewards): a reward function may not take them."""
STOP_CONDITIONS = {
    "max_turns": "max_turns",
    "max_tokens": "max_output_tokens",
    "max_response_tokens": "max_output_tokens",
    "max_total_tokens": "max_total_tokens",
}
"""rlf's length stops as verifiers names them (``Trace.is_truncated`` reads them); any other end is ``agent_completed``."""
RUNTIME_HOOKS = ("setup", "finalize", "stage_verifier")
"""Task methods that prepare or read a verifiers runtime (a container or a box), which rlf does not start."""


class Unsupported(Exception):
    """The environment uses a part of verifiers' API this bridge does not run; the message names it."""


def import_verifiers() -> ModuleType:
    """``verifiers.v1``, checked to be the release this bridge reads."""
    try:
        installed = version("verifiers")
    except PackageNotFoundError:
        raise Unsupported(f"the verifiers plugin needs the verifiers package: {INSTALL}") from None
    if not installed.startswith(SUPPORTED):
        raise Unsupported(f"verifiers {installed} is installed; the verifiers plugin reads verifiers 0.4: {INSTALL}")
    return import_module("verifiers.v1")


@dataclass(frozen=True)
class ToolSpec:
    """One ``@vf.tool`` method of a toolset, under the name verifiers' harnesses give it (``<server>_<tool>``)."""

    name: str
    description: str
    parameters: dict[str, Any]
    server: str
    """The key of its server in :class:`Environment` and :class:`Session` (:func:`server_key`)."""
    method: str
    shared: bool


@dataclass
class Environment:
    """A loaded environment: its taskset, the task class and config its rows rebuild, and its tools."""

    name: str
    taskset: Any
    task_cls: Any
    task_config: Any
    tools: list[ToolSpec]
    shared_servers: dict[str, Any]
    env: Any = None
    """The environment's own ``vf.Env`` whose ``run()`` plays each trajectory (:class:`Exchange`); ``None`` for a
    plain taskset (verifiers' ``SingleAgentEnv``: the model alone)."""
    states: dict[str, Any] = field(default_factory=dict)
    """Each finished trajectory's toolset state, by sample id, until its score reads it."""
    recorded: dict[str, Any] = field(default_factory=dict)
    """Each finished exchange's trace, by sample id: the rewards, metrics and info its ``run()`` recorded."""
    _started: set[str] = field(default_factory=set)
    _env_started: bool = False
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def shared(self, server: str) -> Any:
        """The run's instance of a taskset toolset, set up on first use (verifiers starts these once per eval)."""
        instance = self.shared_servers[server]
        async with self._lock:
            if server not in self._started:
                await instance.setup()
                self._started.add(server)
        return instance

    async def start_env(self) -> None:
        """The env's ``start()`` on the first exchange: what it serves every episode (verifiers starts it once per eval)."""
        async with self._lock:
            if not self._env_started:
                await self.env.start()
                self._env_started = True

    async def close(self) -> None:
        """Release what the taskset toolsets' ``setup`` entered on their exit stacks, and the env's ``start()``."""
        for server in self._started:
            await self.shared_servers[server]._exit_stack.aclose()
        self._started.clear()
        if self._env_started:
            self._env_started = False
            await self.env.stop()


def load(name: str, args: Mapping[str, Any]) -> Environment:
    """Load environment ``name`` with verifiers' own ``load_environment``, then refuse what rlf cannot run."""
    vf = import_verifiers()
    from pydantic import ValidationError

    try:
        config = vf.resolve_env_config({"taskset": {**args, "id": name}})
    except ValidationError as exc:
        raise Unsupported(
            f"verifiers environment {name!r}: its arguments (verifiers.args) are invalid:\n{exc}"
        ) from None
    env = vf.load_environment(config)
    if type(env) is not vf.SingleAgentEnv:
        check_env(vf, name, env)
    harness = vf.default_harness_id(name)
    if harness != "bash":
        raise Unsupported(
            f"verifiers environment {name!r} ships its own harness ({harness!r}); rlf's loop is the harness, and runs "
            "tasksets whose agent is the model alone"
        )
    taskset = env.taskset
    task_cls = type(taskset).task_type()
    if task_cls.NEEDS_CONTAINER:
        raise Unsupported(
            f"verifiers environment {name!r}: {task_cls.__qualname__} needs a container (NEEDS_CONTAINER)"
        )
    task_config = taskset.config.task
    shared = _servers(vf, name, taskset.toolsets(taskset.config), "Taskset.toolsets")
    own = _servers(vf, name, task_cls.toolsets(task_config), "Task.toolsets")
    if clash := set(shared) & set(own):
        raise Unsupported(
            f"verifiers environment {name!r}: tool servers {sorted(clash)} are both taskset- and task-scoped"
        )
    tools = [spec for key, server in shared.items() for spec in _tool_specs(key, server, True)]
    tools += [spec for key, server in own.items() for spec in _tool_specs(key, server, False)]
    names = [spec.name for spec in tools]
    if twice := sorted({n for n in names if names.count(n) > 1}):
        raise Unsupported(
            f"verifiers environment {name!r}: tools {twice} are offered twice (give a server a TOOL_PREFIX)"
        )
    runs = None if type(env) is vf.SingleAgentEnv else env
    return Environment(name, taskset, task_cls, task_config, tools, shared, runs)


def check_env(vf: ModuleType, name: str, env: Any) -> None:
    """Refuse an ``Env`` whose ``run()`` rlf cannot play: rlf's loop is one agent, the model it trains."""
    from verifiers.v1.configs.agent import agent_config_fields

    label = f"verifiers environment {name!r} runs its own Env ({type(env).__qualname__}"
    seats = list(agent_config_fields(env.config))
    if len(seats) != 1:
        raise Unsupported(
            f"{label}, with agents {seats}: a model-played user, a judge or an opponent beside the model); rlf plays "
            "environments with one agent, the model it trains"
        )
    if type(env).finalize is not vf.Env.finalize:
        raise Unsupported(
            f"{label}): its finalize() judges the episode after verifiers scored it, and rlf scores the trajectory "
            "after the exchange, so it would not see the rewards; record them in run()"
        )


def _servers(vf: ModuleType, name: str, servers: list[Any], where: str) -> dict[str, Any]:
    """A list of tool servers by class name (what a trajectory's fresh instances are found by), refusing those
    that do not run in rlf's process."""
    found: dict[str, Any] = {}
    for server in servers:
        label = f"verifiers environment {name!r}: {where} server {type(server).__qualname__}"
        if not isinstance(server, vf.Toolset):
            raise Unsupported(f"{label} is not a vf.Toolset (an MCP server of its own); rlf runs Toolset tools only")
        if getattr(server.config, "url", None):
            raise Unsupported(f"{label} is a remote server (url {server.config.url}); rlf runs toolsets in its process")
        if not isinstance(server.config.runtime, vf.SubprocessConfig):
            raise Unsupported(
                f"{label} asks for the {type(server.config.runtime).__name__} runtime; rlf runs toolsets in its process"
            )
        if server_key(server) in found:
            raise Unsupported(f"{label} is listed twice")
        found[server_key(server)] = server
    return found


def server_key(server: Any) -> str:
    return type(server).__qualname__


def _tool_specs(key: str, server: Any, shared: bool) -> list[ToolSpec]:
    """The server's ``@vf.tool`` methods, with the argument schema MCP derives for them (as ``Toolset.register``)."""
    from mcp.server.mcpserver.tools import Tool as MCPTool
    from verifiers.v1.utils.decorators import discover_decorated

    specs = []
    for fn in discover_decorated(server, "tool"):
        raw = getattr(fn, "tool_name", None) or fn.__name__
        described = MCPTool.from_function(fn, name=raw, description=(fn.__doc__ or "").strip() or None)
        specs.append(
            ToolSpec(
                name=f"{server.server_name}_{raw}" if server.server_name else raw,
                description=described.description or "",
                parameters=described.parameters,
                server=key,
                method=fn.__name__,
                shared=shared,
            )
        )
    return specs


def check_task(environment: Environment, task: Any) -> None:
    """Refuse a task whose hooks need a verifiers runtime, or which rlf would score without all it declares."""
    import verifiers.v1 as vf

    where = f"verifiers environment {environment.name!r}: {type(task).__qualname__}"
    for hook in RUNTIME_HOOKS:
        if getattr(type(task), hook) is not getattr(vf.Task, hook):
            raise Unsupported(f"{where}.{hook}() prepares a verifiers runtime, which rlf does not start")
    for kind in ("stop", "intercept"):
        if names := [fn.__name__ for fn in _hooks(task, kind)]:
            raise Unsupported(f"{where}: @vf.{kind} hooks {names} are not run by rlf's loop")
    for kind in ("reward", "metric"):
        if names := [fn.__name__ for fn in task.hooks(kind) if _needs_runtime(fn)]:
            raise Unsupported(f"{where}: @vf.{kind} functions {names} need a runtime, which rlf does not start")
    if names := [judge.reward_name for judge in task.plugged_judges() if _needs_runtime(judge.score)]:
        raise Unsupported(f"{where}: judges {names} need a runtime, which rlf does not start")
    if clash := [fn.__name__ for fn in task.hooks("reward") if fn.__name__ in RESERVED]:
        raise Unsupported(f"{where}: reward functions {clash} take a name rlf keeps for its own reward components")


def _hooks(task: Any, kind: str) -> list[Any]:
    from verifiers.v1.utils.decorators import discover_decorated

    found: list[Any] = task.hooks(kind) if kind == "stop" else discover_decorated(task, kind)
    return found


def _needs_runtime(fn: Any) -> bool:
    """As verifiers decides whether a scoring function can run offline: a ``runtime`` parameter without a default."""
    param = inspect.signature(fn).parameters.get("runtime")
    return param is not None and param.default is inspect.Parameter.empty


def tasks(environment: Environment, limit: int | None = None) -> Iterator[Any]:
    """The taskset's tasks in its order, at most ``limit``; an endless taskset needs one."""
    taskset = environment.taskset
    if limit is not None:
        taskset = taskset.take(limit)
    elif not taskset.bounded:
        raise Unsupported(f"verifiers environment {environment.name!r} has endless tasks: give a limit")
    yield from taskset


def to_row(environment: Environment, task: Any) -> dict[str, Any]:
    """One task as an rlf row: its prompt as messages, and its data (what scoring rebuilds the task from) in ``extra``."""
    check_task(environment, task)
    data = task.data
    prompt: list[Message] = []
    if data.system_prompt:
        prompt.append({"role": "system", "content": data.system_prompt})
    if data.prompt is None:
        raise Unsupported(f"verifiers environment {environment.name!r}: task {data.idx} has no prompt (the user opens)")
    if isinstance(data.prompt, str):
        prompt.append({"role": "user", "content": data.prompt})
    else:
        prompt += [_from_vf(environment, message) for message in data.prompt]
    return {
        "id": data.id or f"{environment.name}-{data.idx}",
        "prompt": prompt,
        "extra": {
            "verifiers": {
                "env": environment.name,
                "task": data.model_dump(mode="json", exclude_defaults=True),
                "prompt_messages": len(prompt),
            }
        },
    }


def _from_vf(environment: Environment, message: Any, where: str = "a prompt") -> Message:
    """A verifiers system or user message as an rlf one: its text, which rlf renders with the model's template."""
    content = message.content
    if not isinstance(content, str):
        texts = [getattr(part, "text", None) for part in content]
        if any(text is None for text in texts):
            raise Unsupported(f"verifiers environment {environment.name!r}: {where} has non-text content (images)")
        content = "".join(t for t in texts if t is not None)
    out: Message = {"role": message.role, "content": content}
    if message.role not in ("system", "user"):
        raise Unsupported(
            f"verifiers environment {environment.name!r}: {where} has a {message.role} message; rlf takes system "
            "and user messages from it"
        )
    return out


def task_of(environment: Environment, extra: Mapping[str, Any], sample_id: str) -> Any:
    """Rebuild the row's task from what :func:`to_row` stored, checking it came from this environment."""
    stored = extra.get("verifiers")
    if not isinstance(stored, Mapping) or "task" not in stored:
        raise Unsupported(
            f"row {sample_id!r} has no verifiers task in extra.verifiers: write rows with "
            f"`rlf verifiers prepare {environment.name} -o rows.jsonl`"
        )
    if stored.get("env") != environment.name:
        raise Unsupported(
            f"row {sample_id!r} was prepared from verifiers environment {stored.get('env')!r}, "
            f"but verifiers.env is {environment.name!r}"
        )
    data = environment.task_cls.data_type().model_validate(stored["task"])
    task = environment.task_cls(data, environment.task_config)
    check_task(environment, task)
    return task


def new_state(task: Any) -> Any:
    """A fresh state of the task's ``vf.State`` type: what its toolsets and rewards share in one trajectory."""
    from verifiers.v1.state import state_cls

    return state_cls(type(task))()


@contextlib.contextmanager
def calling_with(state: Any) -> Iterator[None]:
    """Make ``state`` what a toolset's ``self.state`` reads during one call, as verifiers' server wrapper does
    for the state it pulls from the rollout (here it lives in the same process, so nothing is pulled)."""
    from verifiers.v1.mcp.server import _call_state

    token = _call_state.set(state)
    try:
        yield
    finally:
        _call_state.reset(token)


class Session:
    """One trajectory's side of the environment: its task, its state, its task-scoped toolsets and, where the
    environment runs its own ``Env.run()``, the :class:`Exchange` that plays it."""

    def __init__(self, environment: Environment, task: Any, sample_id: str, messages: list[Message]) -> None:
        self.environment = environment
        self.task = task
        self.sample_id = sample_id
        self.state = new_state(task)
        self.servers = {server_key(server): server for server in environment.task_cls.toolsets(environment.task_config)}
        self.exchange = None if environment.env is None else Exchange(environment, task, self.state, messages)
        self._opened: list[Any] = []

    async def open(self) -> None:
        """Set the task's toolsets up for this task, as a verifiers rollout does when it launches them, then start
        the env's ``run()``."""
        for server in self.servers.values():
            with calling_with(self.state):
                self._opened.append(server)
                await server.setup()
                await server.setup_task(self.task)
        if self.exchange is not None:
            await self.exchange.start()

    async def call(self, spec: ToolSpec, arguments: dict[str, Any]) -> Any:
        server = await self.environment.shared(spec.server) if spec.shared else self.servers[spec.server]
        with calling_with(self.state):
            result = getattr(server, spec.method)(**arguments)
            if inspect.isawaitable(result):
                result = await result
        return result

    async def aclose(self) -> None:
        """End the env's ``run()``, release the toolsets, and keep the state (and what the run recorded) for the
        trajectory's score."""
        try:
            if self.exchange is not None:
                await self.exchange.finish()
                self.environment.recorded[self.sample_id] = self.exchange.trace
        finally:
            self.environment.states[self.sample_id] = self.state
            for server in self._opened:
                await server._exit_stack.aclose()


class Exchange:
    """One trajectory of an environment whose own ``Env.run()`` plays the episode (a game engine stepping on each
    reply), run against rlf's loop: the env's one agent seat is the model. Each turn the model ends without tool
    calls is the segment its ``interaction.turn()`` returns; the user turn it answers with is what the plugin's
    ``respond`` returns, rlf's next observation. The run ending ends the episode after the model's turn; the
    trajectory ending first (a limit) is the ``terminated`` segment verifiers gives."""

    def __init__(self, environment: Environment, task: Any, state: Any, messages: list[Message]) -> None:
        self.environment = environment
        self.task = task
        self.messages = messages
        """The trajectory's conversation, as the loop appends to it."""
        self.trace = new_trace(environment, task, state)
        """``interaction.trace``: the conversation so far, and what the run records on it."""
        self._prompt = len(messages)
        self._seen = len(messages)
        """How many of the messages the env has had: the prompt, then its segments and its own turns."""
        self._segments: asyncio.Queue[Any] = asyncio.Queue()
        self._replies: asyncio.Queue[list[Message]] = asyncio.Queue()
        self._run: asyncio.Task[None] | None = None
        self._opened = False

    @property
    def label(self) -> str:
        return f"verifiers environment {self.environment.name!r}: {type(self.environment.env).__qualname__}.run()"

    async def start(self) -> None:
        """Start the env's ``setup()`` and ``run()`` on this task, with the model in its one seat."""
        import verifiers.v1 as vf

        await self.environment.start_env()
        agents = vf.Agents(self.environment.env.config, lambda _name, config: _Seat(self, config))
        self._run = asyncio.create_task(self._play(agents))

    async def _play(self, agents: Any) -> None:
        await self.environment.env.setup(agents)
        await self.environment.env.run(self.task, agents)

    async def answer(self) -> list[Message] | None:
        """Hand the model's turn (the last message: it called no tool) to the run, with what the run has not seen
        before it, as its segment; the user turn the run answers with, or ``None`` when the run ended instead."""
        if self._run is None:
            raise RuntimeError(f"{self.label}: the exchange was not started")
        self._refresh(self.messages)
        await self._segments.put(self._segment(self.messages[self._seen :]))
        reply = asyncio.ensure_future(self._replies.get())
        try:
            await asyncio.wait({reply, self._run}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            answered = reply.done()
            reply.cancel()  # a pending get leaves the queue as it was
        if not answered:
            self._raise_failure()
            if not self._segments.empty():
                raise Unsupported(f"{self.label} ended without playing the model's turn: it opened no interaction")
            return None
        messages: list[Message] = reply.result()
        self._seen = len(self.messages) + len(messages)  # the env's turn too, once the loop appends it
        return messages

    async def finish(self) -> None:
        """The trajectory ended: hand the run what it has not seen (a turn cut by a limit) and then the
        ``terminated`` segment, as verifiers does when a limit ends an exchange, and wait for the run to end."""
        if self._run is None:
            return
        try:
            if not self._run.done():
                self._refresh(self.messages)
                rest = self.messages[self._seen :]
                if any(m.get("role") == "assistant" for m in rest):
                    await self._segments.put(self._segment(rest))
                await self._segments.put(self._segment([], terminated=True))
                await asyncio.wait({self._run})
            self._raise_failure()
        finally:
            if not self._run.done():
                self._run.cancel()

    def take(self, message: Any) -> None:
        """The run's user turn (``interaction.turn(message)``): a string, or verifiers messages."""
        import verifiers.v1 as vf
        from pydantic import TypeAdapter

        adapter: TypeAdapter[Any] = TypeAdapter(vf.Message)
        given = [vf.UserMessage(content=message)] if isinstance(message, str) else message
        where = f"{type(self.environment.env).__qualname__}.run()'s user turn"
        typed = [adapter.validate_python(m) if isinstance(m, Mapping) else m for m in given]
        self._replies.put_nowait([_from_vf(self.environment, m, where) for m in typed])

    async def segment(self) -> Any:
        """The model's next segment, as ``interaction.turn()`` waits for it."""
        return await self._segments.get()

    def open(self, task: Any) -> None:
        """``interaction(task)``: the trajectory's task, once (its prompt is the row's, which the model has read)."""
        if task.data != self.task.data:
            raise Unsupported(
                f"{self.label} opened an interaction on another task than the episode's; rlf's trajectory starts from "
                "the row's prompt"
            )
        if self._opened:
            raise Unsupported(f"{self.label} opened a second interaction; rlf plays one exchange per trajectory")
        self._opened = True

    def _segment(self, messages: list[Message], terminated: bool = False) -> Any:
        import verifiers.v1 as vf
        from pydantic import TypeAdapter

        adapter: TypeAdapter[Any] = TypeAdapter(vf.Message)
        typed = [adapter.validate_python(_to_vf(_replied(m))) for m in messages]
        return vf.Segment(messages=typed, terminated=terminated)

    def _refresh(self, messages: list[Message]) -> None:
        self.trace.nodes = nodes([_replied(m) for m in messages], self._prompt)

    def _raise_failure(self) -> None:
        if self._run is not None and self._run.done() and not self._run.cancelled():
            failure = self._run.exception()
            if isinstance(failure, Unsupported):
                raise failure
            if failure is not None:
                raise RuntimeError(f"{self.label} failed: {type(failure).__name__}: {failure}") from failure


def _replied(message: Message) -> Message:
    """The model's turn as verifiers records a reply, its ``<think>`` block apart as reasoning, where rlf kept the
    block in the content (a chat template that does not read ``reasoning_content``, an API that does not split
    it): the env's ``run()`` reads the answer, as a verifiers client hands it over."""
    content = message.get("content")
    if message.get("role") != "assistant" or "reasoning_content" in message or "</think>" not in str(content):
        return message
    thought, _, rest = str(content).partition("</think>")
    return {**message, "content": rest.strip(), "reasoning_content": thought.split("<think>")[-1].strip()}


class _Seat:
    """The env's one agent seat (``agents.<name>``), played by the model in rlf's loop."""

    def __init__(self, exchange: Exchange, config: Any) -> None:
        self.config = config
        self._exchange = exchange

    @contextlib.asynccontextmanager
    async def interaction(self, task: Any) -> AsyncIterator[_Interaction]:
        self._exchange.open(task)
        interaction = _Interaction(self._exchange)
        try:
            yield interaction
        finally:
            interaction.closed = True

    async def run(self, task: Any) -> Any:
        """One segment: the model's turns on the task's prompt until one calls no tool."""
        async with self.interaction(task) as interaction:
            await interaction.turn()
        return interaction.trace


class _Interaction:
    """``agent.interaction(task)`` as the env's ``run()`` reads it: ``turn()`` and ``trace``, held to verifiers'
    rules (a prompted task's first turn is a bare ``turn()``, nothing after a ``terminated`` segment)."""

    def __init__(self, exchange: Exchange) -> None:
        self.closed = False
        self._exchange = exchange
        self._started = False
        self._over = False

    @property
    def trace(self) -> Any:
        return self._exchange.trace

    async def turn(self, message: Any = None) -> Any:
        if self.closed:
            raise RuntimeError("this interaction is closed")
        if self._over:
            raise RuntimeError("the exchange is over (the run ended); read interaction.trace")
        if message is None and self._started:
            raise ValueError("nothing to run a turn on: this exchange takes its next user message")
        if message is not None and not self._started:
            raise ValueError("the task's prompt opens this exchange: take its first reply with a bare turn()")
        if message is not None:
            self._exchange.take(message)
        self._started = True
        segment = await self._exchange.segment()
        self._over = segment.terminated
        return segment

    async def close(self) -> Any:
        self.closed = True
        return self.trace


def to_trace(
    environment: Environment,
    task: Any,
    messages: list[Message],
    prompt_messages: int,
    state: Any | None,
    stop_reason: str = "",
) -> Any:
    """The trace a verifiers rollout of this trajectory would have recorded: its messages as a one-branch graph
    (the model's turns ``sampled``), the tools offered, how it ended, and the toolsets' state (a fresh one where the
    trajectory left none, as when ``rlf rescore`` reads stored trajectories)."""
    trace = new_trace(environment, task, new_state(task) if state is None else state)
    trace.nodes = nodes(messages, prompt_messages)
    trace.ok = True
    trace.stop(STOP_CONDITIONS.get(stop_reason, "agent_completed"))
    return trace


def new_trace(environment: Environment, task: Any, state: Any) -> Any:
    """An empty trace of ``task`` with the tools offered and ``state``."""
    import verifiers.v1 as vf

    return vf.Trace(
        task=vf.TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
        state=state,
        agent=vf.AgentInfo(config=vf.AgentConfig(), name="rlf"),
        tools=[vf.Tool(name=t.name, description=t.description, parameters=t.parameters) for t in environment.tools],
    )


def nodes(messages: list[Message], prompt_messages: int) -> list[Any]:
    """``messages`` as a one-branch message graph, the model's turns after the prompt ``sampled``."""
    import verifiers.v1 as vf
    from pydantic import TypeAdapter

    adapter: TypeAdapter[Any] = TypeAdapter(vf.Message)
    return [
        vf.MessageNode(
            parent=i - 1 if i else None,
            message=adapter.validate_python(_to_vf(message)),
            sampled=message["role"] == "assistant" and i >= prompt_messages,
        )
        for i, message in enumerate(messages)
    ]


def _to_vf(message: Message) -> dict[str, Any]:
    """An rlf chat message in verifiers' shape: tool-call arguments as the JSON text the model wrote."""
    out = {k: v for k, v in message.items() if k in ("role", "content", "tool_call_id", "name", "reasoning_content")}
    if message.get("role") == "assistant" and message.get("tool_calls"):
        out["tool_calls"] = [
            {
                "id": call.get("id") or f"call_{n}",
                "name": call["function"]["name"],
                "arguments": json.dumps(call["function"]["arguments"]),
            }
            for n, call in enumerate(message["tool_calls"])
        ]
    if out.get("role") == "tool":
        out.setdefault("tool_call_id", "")
    return out


async def score(trace: Any, task: Any, recorded: Any | None = None) -> Score:
    """The task's rewards and metrics on ``trace``: each reward's raw score as a component under its name, each
    metric as ``metric.<name>``, and verifiers' weighted sum as the value. Its plugged judges are left to
    :func:`judge`, rlf's judge path. ``recorded`` is an exchange's trace: what its ``run()`` recorded (rewards,
    metrics, info) joins them after the task's scoring, as the run records them after verifiers scored."""
    unjudged = type(task)(task.data, task.config.model_copy(update={"judges": []}))
    await unjudged.score(trace)
    if recorded is not None:
        if clash := sorted(set(recorded.rewards) & set(RESERVED)):
            raise Unsupported(
                f"the environment's run() recorded rewards {clash}, names rlf keeps for its own components"
            )
        trace.rewards.update(recorded.rewards)
        trace.metrics.update(recorded.metrics)
        trace.info.update(recorded.info)
    missing = [name for name, reward in trace.rewards.items() if reward is None]
    if missing:
        return Score(value=0.0, error=f"verifiers rewards {missing} did not score")
    components = {name: reward.score for name, reward in trace.rewards.items()}
    components.update({f"metric.{name}": value for name, value in trace.metrics.items() if value is not None})
    return Score(value=trace.reward, components=components)


async def judge(trace: Any, task: Any, endpoints: list[str]) -> float:
    """The task's plugged judges (``TaskConfig.judges``) on ``trace``, summed with their weights as ``Task.score``
    sums them. Where the trainer serves a judge model (``endpoints``, verl's reward router), every judge asks
    it; elsewhere each asks the endpoint its config names."""
    from verifiers.v1.utils.decorators import invoke_all

    judges = task.plugged_judges()
    if endpoints:
        for each in judges:
            each.config = each.config.model_copy(update={"base_url": endpoints[0]})
    results = await invoke_all([each.score for each in judges], {"task": task.data, "trace": trace})
    total = 0.0
    for each, result in zip(judges, results):
        values = result.values() if isinstance(result, Mapping) else [result]
        total += sum(float(value) * each.config.weight for value in values)
    return total
