"""OpenEnv's wire protocol, spoken without importing openenv (whose fastmcp pins mcp<2, which rlf-mcp refuses).

An OpenEnv server's HTTP ``/reset`` and ``/step`` build a fresh environment per request; an episode lives on
its ``/ws`` WebSocket: ``{"type": "reset", "data": {...}}`` and ``{"type": "step", "data": ACTION}`` answer
``{"type": "observation", "data": {"observation", "reward", "done"}}`` or ``{"type": "error", "data":
{"message", "code"}}``, and ``{"type": "close"}`` releases the server's environment of that connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx

from rlf_openenv.settings import Server

if TYPE_CHECKING:
    from websockets.asyncio.client import ClientConnection


class OpenEnvError(RuntimeError):
    """The server refused or failed a request; the message says which server and what it answered."""


@dataclass
class Step:
    """One observation of the server: what the model reads, the reward that came with it, whether it ended."""

    observation: dict[str, Any]
    reward: float | None
    done: bool

    def text(self) -> str:
        """The observation as the model reads it: its fields as JSON, ``metadata`` (the harness's) left out."""
        return json.dumps({k: v for k, v in self.observation.items() if k != "metadata"}, ensure_ascii=False)


@dataclass
class ServerProcess:
    """The server rlf started for the run; :meth:`stop` ends it and its children."""

    url: str
    proc: subprocess.Popen[bytes]
    log: str

    def stop(self) -> None:
        """End the server's process group (SIGTERM, then SIGKILL after 10 s) and remove its log."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.log)


def start(server: Server) -> ServerProcess:
    """Start ``server.command`` on a free loopback port and wait until its ``/health`` answers."""
    port = _free_port()
    argv = [part.replace("{port}", str(port)) for part in server.command]
    url = f"http://127.0.0.1:{port}"
    log = tempfile.NamedTemporaryFile(prefix="rlf-openenv-", suffix=".log", delete=False)  # noqa: SIM115
    try:
        proc = subprocess.Popen(
            argv,
            cwd=server.cwd,
            env={**os.environ, **server.env},
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError as exc:
        os.unlink(log.name)
        raise OpenEnvError(f"openenv.server.command {argv} could not start: {exc}") from None
    finally:
        log.close()
    running = ServerProcess(url, proc, log.name)
    deadline = time.monotonic() + server.startup_timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            output = _tail(log.name)
            running.stop()
            raise OpenEnvError(f"openenv.server.command {argv} exited with {proc.returncode}: {output}")
        if _healthy(url):
            return running
        time.sleep(0.2)
    output = _tail(log.name)
    running.stop()
    raise OpenEnvError(
        f"openenv.server.command {argv}: {url}/health did not answer within {server.startup_timeout_s:g} s "
        f"(openenv.server.startup_timeout_s): {output}"
    )


async def mcp_tools(url: str, timeout_s: float) -> list[dict[str, Any]]:
    """The tools an MCP environment (``MCPEnvironment``) lists: ``{"name", "description", "input_schema"}`` each."""
    episode = Episode(url, timeout_s)
    try:
        await episode.connect()
        listed = await episode.step({"type": "list_tools"})
    finally:
        await episode.close()
    tools = listed.observation.get("tools")
    if not isinstance(tools, list):
        raise OpenEnvError(f"openenv server {url} listed no MCP tools (openenv.tools: mcp): {listed.text()[:500]}")
    return tools


def mcp_result(step: Step) -> str:
    """A ``call_tool`` step's result as the model reads it (its text contents), or the environment's error."""
    error = step.observation.get("error")
    if error:
        raise OpenEnvError(f"{error.get('error_type', 'error')}: {error.get('message')}")
    result = step.observation.get("result")
    if isinstance(result, dict) and isinstance(result.get("content"), list):
        texts = [c.get("text", "") for c in result["content"] if isinstance(c, dict) and c.get("type") == "text"]
        if texts:
            return "\n".join(texts)
    return json.dumps(result, ensure_ascii=False)


def action_schema(url: str) -> dict[str, Any]:
    """The server's action schema (``GET /schema``), less the ``metadata`` field every OpenEnv action has."""
    try:
        response = httpx.get(f"{url}/schema", timeout=30.0)
        response.raise_for_status()
    except httpx.HTTPError as exc:
        raise OpenEnvError(f"openenv server {url}: GET /schema failed: {exc}") from None
    schema = dict(response.json()["action"])
    properties = {k: v for k, v in schema.get("properties", {}).items() if k != "metadata"}
    return {**schema, "properties": properties}


class Episode:
    """One episode on its own ``/ws`` connection: the server keeps an environment for it until :meth:`close`."""

    def __init__(self, url: str, timeout_s: float) -> None:
        self.url = url
        self.ws_url = "ws" + url.removeprefix("http") + "/ws"
        self.timeout_s = timeout_s
        self._ws: ClientConnection | None = None

    async def connect(self) -> None:
        from websockets.asyncio.client import connect

        try:
            self._ws = await connect(self.ws_url, max_size=None, open_timeout=self.timeout_s)
        except (OSError, TimeoutError) as exc:
            raise OpenEnvError(f"openenv server {self.url} is unreachable: {exc}") from None

    async def reset(self, arguments: dict[str, Any]) -> Step:
        await self.connect()
        return await self._ask({"type": "reset", "data": arguments})

    async def step(self, action: dict[str, Any]) -> Step:
        return await self._ask({"type": "step", "data": action})

    async def _ask(self, message: dict[str, Any]) -> Step:
        from websockets.exceptions import ConnectionClosed

        assert self._ws is not None, "reset before step"
        try:
            with contextlib.suppress(ConnectionClosed):  # a server refusing the episode sent why before it closed
                await self._ws.send(json.dumps(message))
            answer = json.loads(await asyncio.wait_for(self._ws.recv(), self.timeout_s))
        except ConnectionClosed as exc:
            raise OpenEnvError(f"openenv server {self.url} closed the episode's connection: {exc}") from None
        except TimeoutError:
            raise OpenEnvError(
                f"openenv server {self.url}: {message['type']} took longer than openenv.timeout_s ({self.timeout_s:g} s)"
            ) from None
        data = answer.get("data", {})
        if answer.get("type") != "observation":
            raise OpenEnvError(f"openenv server {self.url} refused the {message['type']}: {_error(data)}")
        reward = data.get("reward")
        return Step(dict(data.get("observation", {})), None if reward is None else float(reward), bool(data["done"]))

    async def close(self) -> None:
        """Tell the server the episode is over (it releases its environment) and close the connection."""
        ws, self._ws = self._ws, None
        if ws is None:
            return
        from websockets.exceptions import ConnectionClosed

        with contextlib.suppress(ConnectionClosed, OSError):  # a server gone already has nothing to release
            await ws.send(json.dumps({"type": "close"}))
        await ws.close()


@dataclass
class Returns:
    """What an episode earned, kept from its session's close to its score."""

    rewards: list[float] = field(default_factory=list)
    done: bool = False


def _error(data: dict[str, Any]) -> str:
    message = f"{data.get('code', 'ERROR')}: {data.get('message', data)}"
    errors = data.get("errors")
    if isinstance(errors, list):
        message += "; " + "; ".join(f"{'.'.join(map(str, e.get('loc', [])))}: {e.get('msg')}" for e in errors)
    return message


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=2.0).status_code == httpx.codes.OK
    except httpx.HTTPError:
        return False


def _tail(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()[-2000:].strip()
    return text or "(no output)"
