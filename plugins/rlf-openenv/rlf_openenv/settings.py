"""The ``openenv:`` section of a run config: which server, the tool its actions are, the reset arguments."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Server(BaseModel):
    """How rlf starts the environment's server for the run (and stops it at the run's end)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    command: list[str] = Field(
        min_length=1,
        description="The server's argv; '{port}' in it is replaced by a free loopback port rlf picks, e.g. "
        "['python', '-m', 'uvicorn', 'server.app:app', '--host', '127.0.0.1', '--port', '{port}'].",
    )
    cwd: str | None = Field(None, description="The folder it runs in (default: the current one).")
    env: dict[str, str] = Field(default_factory=dict, description="Environment variables added to rlf's.")
    startup_timeout_s: float = Field(60.0, gt=0, description="How long its /health may take to answer.")


class Settings(BaseModel):
    """Either ``url`` (a server already running) or ``server`` (one rlf starts)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str | None = Field(None, description="A running OpenEnv server, e.g. 'http://127.0.0.1:8000'.")
    server: Server | None = Field(None, description="The server rlf starts for the run.")
    tools: Literal["action", "mcp"] = Field(
        "action",
        description="'action': one tool whose arguments are the environment's action; 'mcp': the tools an "
        "MCPEnvironment lists, each called with a call_tool step.",
    )
    tool: str = Field("step", description="With tools: action, the name of the tool whose arguments are the action.")
    description: str | None = Field(
        None, description="The tool's description (default: the action schema's, else a generic one)."
    )
    reset: dict[str, Any] = Field(
        default_factory=dict,
        description="Arguments of every episode's reset (seed, episode_id, the environment's own); a row's "
        "extra.openenv.reset overrides them.",
    )
    timeout_s: float = Field(60.0, gt=0, description="How long one reset or step may take.")

    @model_validator(mode="after")
    def _one_server(self) -> Settings:
        if self.url is not None and self.server is not None:
            raise ValueError("set openenv.url (a running server) or openenv.server (one rlf starts), not both")
        return self
