"""An MCP server that exposes another model (or an agent behind an API) as one tool: ``ask(question)``.

The policy being trained can then consult a stronger model, a specialist, or an agent, exactly as it
calls any other tool. The model behind the tool is any OpenAI-compatible chat endpoint (vLLM,
SGLang, llama.cpp, an agent framework's server, a hosted API): ``POST {base_url}/chat/completions``.

Settings come from the command line or the environment (the API key only from the environment, so
it never shows in a process list):

===========================  ===========================  =========================================
option                       environment                  meaning
===========================  ===========================  =========================================
``--base-url``               ``RLF_MODEL_TOOL_BASE_URL``  the endpoint, ending in ``/v1``
``--model``                  ``RLF_MODEL_TOOL_MODEL``     the served model's name
(none)                       ``RLF_MODEL_TOOL_API_KEY``   sent as ``Authorization: Bearer ...``
``--system``                 ``RLF_MODEL_TOOL_SYSTEM``    a system prompt for every question
``--description``                                         what the policy reads about the tool
``--max-tokens``                                          the answer's length limit (default 512)
``--timeout``                                             seconds per question (default 120)
===========================  ===========================  =========================================

In a run config::

    mcp:
      servers:
        expert:
          command: python
          args: [-m, rlf_mcp.servers.model_tool, --model, Qwen3-32B]
          env: {RLF_MODEL_TOOL_BASE_URL: "http://127.0.0.1:8000/v1", RLF_MODEL_TOOL_API_KEY: "${EXPERT_KEY:-}"}
          prefix: expert_

The request runs in the server's worker thread with the standard library's HTTP client, so the
server needs nothing beyond the MCP SDK.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

DEFAULT_DESCRIPTION = "Ask another model a question and get its answer as text."


@dataclass(frozen=True)
class Endpoint:
    """Where the questions go."""

    base_url: str
    model: str
    api_key: str | None = None
    system: str | None = None
    max_tokens: int = 512
    timeout_s: float = 120.0


class AskError(RuntimeError):
    """The model could not answer; the message says why (the endpoint's status or reply)."""


def ask(endpoint: Endpoint, question: str) -> str:
    """One chat completion: the question (after the system prompt, if any) in, the answer's text out."""
    messages = ([{"role": "system", "content": endpoint.system}] if endpoint.system else []) + [
        {"role": "user", "content": question}
    ]
    body = json.dumps({"model": endpoint.model, "messages": messages, "max_tokens": endpoint.max_tokens}).encode()
    headers = {"Content-Type": "application/json"}
    if endpoint.api_key:
        headers["Authorization"] = f"Bearer {endpoint.api_key}"
    url = endpoint.base_url.rstrip("/") + "/chat/completions"
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=endpoint.timeout_s) as response:
            reply: Any = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:300]
        raise AskError(f"the model endpoint answered HTTP {exc.code}: {detail}") from None
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise AskError(f"cannot reach the model endpoint at {url}: {getattr(exc, 'reason', exc)}") from None
    except json.JSONDecodeError:
        raise AskError("the model endpoint's reply is not JSON") from None
    try:
        content = reply["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise AskError(f"the model endpoint's reply has no choices[0].message.content: {str(reply)[:300]}") from None
    return content or ""


def build_server(endpoint: Endpoint, description: str = DEFAULT_DESCRIPTION) -> MCPServer:
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    server = MCPServer("model-tool", instructions=f"Questions go to the model {endpoint.model}.", log_level="WARNING")

    @server.tool(name="ask", description=description)
    def ask_model(question: Annotated[str, Field(description="The question, with all the context it needs.")]) -> str:
        try:
            return ask(endpoint, question)
        except AskError as exc:
            raise ToolError(str(exc)) from None

    return server


def main(argv: list[str] | None = None) -> None:
    from rlf_mcp.servers.run import parser, serve

    env = os.environ.get
    cli = parser("An MCP server whose tool `ask` puts questions to another model (an OpenAI-compatible endpoint).")
    cli.add_argument("--base-url", default=env("RLF_MODEL_TOOL_BASE_URL"), help="the endpoint, ending in /v1")
    cli.add_argument("--model", default=env("RLF_MODEL_TOOL_MODEL"), help="the served model's name")
    cli.add_argument("--system", default=env("RLF_MODEL_TOOL_SYSTEM"), help="a system prompt for every question")
    cli.add_argument(
        "--description", default=DEFAULT_DESCRIPTION, help="the tool's description, as the policy reads it"
    )
    cli.add_argument("--max-tokens", type=int, default=512)
    cli.add_argument("--timeout", type=float, default=120.0, help="seconds per question")
    args = cli.parse_args(argv)
    missing = [flag for flag, value in (("--base-url", args.base_url), ("--model", args.model)) if not value]
    if missing:
        cli.error(f"set {' and '.join(missing)} (or RLF_MODEL_TOOL_BASE_URL / RLF_MODEL_TOOL_MODEL)")
    endpoint = Endpoint(
        base_url=args.base_url,
        model=args.model,
        api_key=env("RLF_MODEL_TOOL_API_KEY") or None,
        system=args.system,
        max_tokens=args.max_tokens,
        timeout_s=args.timeout,
    )
    serve(build_server(endpoint, args.description), args)


if __name__ == "__main__":
    main(sys.argv[1:])
