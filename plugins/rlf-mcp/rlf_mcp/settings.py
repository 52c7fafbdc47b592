"""The ``mcp:`` section of a run config, and the servers it names.

Servers are written in the standard ``mcpServers`` format that Claude Desktop, Claude Code, qwen-agent
and RL-Factory read: a mapping from server name to either a local command (stdio) or a URL (streamable
HTTP or SSE). They come inline (``mcp.servers``) or from a JSON file (``mcp.config_file``), so an
existing MCP config can be used as it is. rlf adds per-server ``include``/``exclude``/``prefix``.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

Transport = Literal["stdio", "streamable-http", "sse"]

TRANSPORT_NAMES: dict[str, Transport] = {
    "stdio": "stdio",
    "http": "streamable-http",
    "streamable-http": "streamable-http",
    "streamable_http": "streamable-http",
    "streamableHttp": "streamable-http",
    "sse": "sse",
}
"""The spellings of ``type`` (or ``transport``) that MCP clients use, and what each means."""

IGNORED_KEYS = ("autoApprove", "alwaysAllow", "timeout", "description")
"""Keys other MCP clients keep in their server entries; accepted and ignored so their files work as they are."""

DEFAULT_SERVER = "calculator"

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class McpConfigError(ValueError):
    """A server entry or the config file is unusable; the message names the server and the field."""


class ServerConfig(BaseModel):
    """One entry of ``mcpServers``: a ``command`` to run (stdio) or a ``url`` to connect to."""

    model_config = ConfigDict(extra="forbid")

    command: str | None = Field(None, description="Executable of a stdio server.")
    args: list[str] = Field(default_factory=list, description="Its arguments.")
    env: dict[str, str] = Field(
        default_factory=dict, description="Environment variables for it, over a minimal inherited set (HOME, PATH...)."
    )
    cwd: str | None = Field(None, description="Its working folder; relative to the file that names the server.")
    url: str | None = Field(None, description="URL of a remote server (streamable HTTP or SSE).")
    type: str | None = Field(
        None,
        validation_alias=AliasChoices("type", "transport"),
        description="stdio, http (streamable-http) or sse; default: stdio with a command, "
        "else sse for URLs ending in /sse, else http.",
    )
    headers: dict[str, str] = Field(
        default_factory=dict, description="HTTP headers of a remote server (e.g. Authorization)."
    )
    sse_read_timeout: float = Field(300.0, gt=0, description="SSE only: seconds to wait for the next event.")
    include: list[str] | None = Field(None, description="Offer only these of the server's tools (default: all).")
    exclude: list[str] = Field(default_factory=list, description="Never offer these tools.")
    prefix: str = Field("", description="Prepended to the server's tool names, to keep servers' names apart.")
    disabled: bool = Field(False, description="Skip this server.")

    @model_validator(mode="before")
    @classmethod
    def _drop_client_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if k not in IGNORED_KEYS}
        return data

    @model_validator(mode="after")
    def _one_kind(self) -> ServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("give either `command` (a stdio server) or `url` (a remote server), not both or neither")
        if self.type is not None and self.type not in TRANSPORT_NAMES:
            raise ValueError(f"unknown type {self.type!r}; use one of: stdio, http, streamable-http, sse")
        if self.command is not None and self.transport != "stdio":
            raise ValueError(f"type {self.type!r} needs a `url`; a `command` runs a stdio server")
        if self.url is not None and self.transport == "stdio":
            raise ValueError("type 'stdio' needs a `command`, not a `url`")
        return self

    @property
    def transport(self) -> Transport:
        if self.type is not None:
            return TRANSPORT_NAMES[self.type]
        if self.command is not None:
            return "stdio"
        return "sse" if (self.url or "").rstrip("/").endswith("/sse") else "streamable-http"


class McpSettings(BaseModel):
    """The ``mcp:`` section. With neither ``servers`` nor ``config_file``, the bundled calculator runs."""

    model_config = ConfigDict(extra="forbid")

    servers: dict[str, ServerConfig] | None = Field(
        None, description="Servers by name, as in `mcpServers` (that wrapper key may be kept). `{}`: none."
    )
    config_file: str | None = Field(
        None, description='A JSON file {"mcpServers": {...}}; relative to the run config. Adds to `servers`.'
    )
    startup_timeout_s: float = Field(30.0, gt=0, description="To start a server, initialize it and list its tools.")
    call_timeout_s: float | None = Field(
        None, gt=0, description="Per MCP tool call; default: the core's tools.timeout_s."
    )
    ping_timeout_s: float = Field(
        5.0,
        gt=0,
        description="After a call times out, the server must answer a ping within this, or it is restarted as hung.",
    )
    restart_backoff_s: float = Field(
        0.5, ge=0, description="Wait before the first restart; doubles per failure, up to 30 s."
    )
    max_restarts: int = Field(
        10, ge=0, description="Failed restarts in a row (no successful call between) before a server is given up."
    )

    @field_validator("servers", mode="before")
    @classmethod
    def _unwrap(cls, value: Any) -> Any:
        if isinstance(value, dict) and set(value) == {"mcpServers"}:
            return value["mcpServers"]
        return value


@dataclass(frozen=True)
class ServerSpec:
    """How to reach one server, resolved (variables expanded, paths absolute): a process shares one
    running server among every toolset whose spec is equal."""

    name: str
    transport: Transport
    command: str | None = None
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    cwd: str | None = None
    url: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    sse_read_timeout: float = 300.0
    where: str = field(default="", compare=False)
    """Where the server was configured, for error messages."""

    def key(self) -> str:
        data = asdict(self)
        data.pop("where")
        return json.dumps(data, sort_keys=True)

    def describe(self) -> str:
        target = " ".join([self.command or "", *self.args]) if self.transport == "stdio" else self.url
        return f"{self.transport} {target}"


@dataclass(frozen=True)
class ServerEntry:
    """A configured server: how to reach it, and which of its tools to offer under which names."""

    spec: ServerSpec
    include: tuple[str, ...] | None
    exclude: tuple[str, ...]
    prefix: str


def bundled_calculator() -> ServerConfig:
    """The calculator example server, run with this Python: the default when nothing is configured."""
    return ServerConfig(command=sys.executable, args=["-m", "rlf_mcp.servers.calculator"])


def uses_default(settings: McpSettings) -> bool:
    return settings.servers is None and settings.config_file is None


def configured_servers(settings: McpSettings, base_dir: Path) -> list[ServerEntry]:
    """Every enabled server of the section, resolved; ``base_dir`` is the run config's folder."""
    found: dict[str, tuple[ServerConfig, Path, str]] = {}
    if uses_default(settings):
        found[DEFAULT_SERVER] = (bundled_calculator(), base_dir, "the bundled default")
    for name, cfg in (settings.servers or {}).items():
        found[name] = (cfg, base_dir, "mcp.servers")
    if settings.config_file is not None:
        path = Path(os.path.expanduser(settings.config_file))
        path = path if path.is_absolute() else base_dir / path
        for name, cfg in read_config_file(path).items():
            if name in found:
                raise McpConfigError(f"server {name!r} is defined both in mcp.servers and in {path}; rename one")
            found[name] = (cfg, path.parent, str(path))
    return [_entry(name, cfg, folder, where) for name, (cfg, folder, where) in found.items() if not cfg.disabled]


def read_config_file(path: Path) -> dict[str, ServerConfig]:
    """The servers of a ``{"mcpServers": {...}}`` JSON file, each validated, errors naming server and field."""
    if not path.is_file():
        raise McpConfigError(f"mcp.config_file: no such file: {path}")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}"
        raise McpConfigError(f"mcp.config_file {path}: not valid JSON: {where}: {exc.msg}") from None
    servers = data.get("mcpServers") if isinstance(data, dict) else None
    if not isinstance(servers, dict):
        raise McpConfigError(f'mcp.config_file {path}: expected an object with an "mcpServers" object inside')
    out = {}
    for name, raw in servers.items():
        try:
            out[name] = ServerConfig.model_validate(raw)
        except ValidationError as exc:
            raise McpConfigError(f"mcp.config_file {path}: {_problems(name, exc)}") from None
    return out


def _problems(server: str, exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        parts.append(f"server {server!r}" + (f", field {loc!r}" if loc else "") + f": {err['msg']}")
    return "; ".join(parts)


def _entry(name: str, cfg: ServerConfig, folder: Path, where: str) -> ServerEntry:
    def expand(value: str, what: str) -> str:
        def var(match: re.Match[str]) -> str:
            value = os.environ.get(match.group(1), match.group(2))
            if value is None:
                raise McpConfigError(
                    f"server {name!r} ({where}), field {what!r}: environment variable {match.group(1)} is not set "
                    f"(write ${{{match.group(1)}:-default}} for a default)"
                )
            return value

        return _VAR.sub(var, value)

    cwd = None
    if cfg.cwd is not None:
        path = Path(os.path.expanduser(expand(cfg.cwd, "cwd")))
        cwd = str(path if path.is_absolute() else (folder / path).resolve())
    spec = ServerSpec(
        name=name,
        transport=cfg.transport,
        command=expand(cfg.command, "command") if cfg.command is not None else None,
        args=tuple(expand(a, f"args[{i}]") for i, a in enumerate(cfg.args)),
        env=tuple(sorted((k, expand(v, f"env.{k}")) for k, v in cfg.env.items())),
        cwd=cwd,
        url=expand(cfg.url, "url") if cfg.url is not None else None,
        headers=tuple(sorted((k, expand(v, f"headers.{k}")) for k, v in cfg.headers.items())),
        sse_read_timeout=cfg.sse_read_timeout,
        where=where,
    )
    include = tuple(cfg.include) if cfg.include is not None else None
    return ServerEntry(spec=spec, include=include, exclude=tuple(cfg.exclude), prefix=cfg.prefix)
