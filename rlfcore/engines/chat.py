"""An evaluation engine on any OpenAI-compatible chat-completions API (hosted models, vLLM, SGLang).

Messages go out and a message comes back: no token ids, no logprobs. It can measure a model, never
train one (training needs the ids the model sampled), so ``rlf train`` refuses it. Tool calls travel
one of two ways (``engine.chat_tools``):

- ``api``: the tools in the request's ``tools`` field, the calls read from the answer's
  ``tool_calls`` and the results sent back as ``tool`` messages: what a hosted API or a server with a
  tool parser expects.
- ``text``: the tools listed in the system message in the format of ``rollout.parser``, the calls
  parsed from the answer's text by that parser and the results sent back as a user message: a
  model's own text format, through an API that knows nothing of tools.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from rlfcore.engines.answers import EngineError, first_choice, loads, snippet, typed
from rlfcore.engines.openai import JSONEndpoint, optional_sampling
from rlfcore.schema import CHAT_ENGINES, TRAINING_REFUSED

if TYPE_CHECKING:
    from rlfcore.config import EngineConfig, RunConfig
    from rlfcore.engines.base import SamplingParams
    from rlfcore.types import Message, ToolCall


def refuse_chat_engine(config: RunConfig) -> None:
    """Training's guard: a :class:`~rlfcore.config.ConfigError` at ``engine.name`` for a chat engine."""
    from rlfcore.config import ConfigError, ConfigIssue

    name = config.engine.name
    if name in CHAT_ENGINES:
        source = str(config.source) if config.source else "config"
        raise ConfigError([ConfigIssue(path="engine.name", message=TRAINING_REFUSED.format(name=name))], source=source)


_FINISH: dict[Any, Literal["stop", "length"]] = {
    "stop": "stop",
    "tool_calls": "stop",
    "function_call": "stop",
    "eos": "stop",
    "length": "length",
}


@dataclass(frozen=True)
class TextFormat:
    """How ``text`` mode writes a parser's tools and results for a model that reads them as text."""

    instructions: str
    result_open: str
    result_close: str


_HERMES = TextFormat(
    instructions=(
        "For each function call, return a JSON object with the function name and arguments within "
        '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
    ),
    result_open="<tool_response>\n",
    result_close="\n</tool_response>",
)
TEXT_FORMATS: dict[str, TextFormat] = {
    "hermes": _HERMES,
    "qwen3": _HERMES,
    "llama3-json": TextFormat(
        instructions=(
            "To call a function, respond with only a JSON object of the form "
            '{"name": <function-name>, "parameters": <args-json-object>}.'
        ),
        result_open="",
        result_close="",
    ),
}
"""The parsers ``text`` mode can describe tools for; other parsers need ``engine.chat_tools: api``."""


@dataclass
class ChatReply:
    """One answer: its text, the calls of its ``tool_calls`` field, and the message to send back."""

    content: str
    finish_reason: Literal["stop", "length"]
    tool_calls: list[ToolCall] = field(default_factory=list)
    reasoning: str | None = None
    completion_tokens: int = 0
    message: dict[str, Any] = field(default_factory=dict)
    """The assistant message as the API wrote it, for the next request's history."""


class ChatEngine(JSONEndpoint):
    """POSTs ``{base_url}/chat/completions`` once per turn; turns of many trajectories may run at once.

    Failures are retried or raised as :class:`~rlfcore.engines.openai.JSONEndpoint` says, as
    :class:`EngineError` naming the URL and the cause (``HTTP 404``, ``ConnectError``); the loop turns
    one into that trajectory's error.
    """

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        *,
        tools: Literal["api", "text"] = "api",
        parser: str = "hermes",
        api_key: str | None = None,
        timeout_s: float = 600.0,
        max_retries: int = 3,
        backoff_s: float = 0.5,
        max_connections: int = 256,
        max_response_bytes: int = 64 * 2**20,
        extra_body: dict[str, Any] | None = None,
    ):
        if tools == "text" and parser not in TEXT_FORMATS:
            raise ValueError(
                f"engine.chat_tools: text describes tools only for rollout.parser {', '.join(TEXT_FORMATS)} "
                f"(got {parser!r}); use engine.chat_tools: api to send them in the request's tools field"
            )
        super().__init__(
            base_url.rstrip("/") + "/chat/completions",
            api_key=api_key,
            timeout_s=timeout_s,
            max_retries=max_retries,
            backoff_s=backoff_s,
            max_connections=max_connections,
            max_response_bytes=max_response_bytes,
        )
        self.model = model
        self.tools = tools
        self.format = TEXT_FORMATS.get(parser) if tools == "text" else None
        self.extra_body = dict(extra_body or {})

    @classmethod
    def from_config(cls, cfg: EngineConfig, parser: str = "hermes") -> ChatEngine:
        if not cfg.base_url:
            raise ValueError("engine 'openai-chat' needs engine.base_url: the API's URL, ending in /v1")
        return cls(
            cfg.base_url,
            cfg.model,
            tools=cfg.chat_tools,
            parser=parser,
            api_key=cfg.key(),
            timeout_s=cfg.timeout_s,
            max_response_bytes=cfg.max_response_bytes,
        )

    # --- messages ----------------------------------------------------------------------------------

    def prompt(self, messages: list[Message], schemas: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """A row's prompt as the API takes it; in ``text`` mode the system message lists the tools."""
        out = [self._api_message(m) for m in messages]
        if self.format is not None and schemas:
            listing = "\n".join(json.dumps(s, ensure_ascii=False) for s in schemas)
            block = (
                "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                f"You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{listing}\n"
                f"</tools>\n\n{self.format.instructions}"
            )
            if out and out[0]["role"] == "system":
                out[0] = {**out[0], "content": f"{out[0].get('content') or ''}\n\n{block}".lstrip()}
            else:
                out.insert(0, {"role": "system", "content": block})
        return out

    def observation(self, messages: list[Message]) -> list[dict[str, Any]]:
        """Tool results for the API: ``tool`` messages (``api``), or one user message of wrapped results (``text``)."""
        if self.format is None:
            return [self._api_message(m) for m in messages]
        results = [m for m in messages if m.get("role") == "tool"]
        out = [self._api_message(m) for m in messages if m.get("role") != "tool"]
        if results:
            text = "\n".join(
                f"{self.format.result_open}{m.get('content') or ''}{self.format.result_close}" for m in results
            )
            out.append({"role": "user", "content": text})
        return out

    def _api_message(self, m: Message) -> dict[str, Any]:
        """Only the fields chat APIs accept; call arguments as the JSON strings the API format has."""
        out: dict[str, Any] = {"role": m["role"], "content": m.get("content") or ""}
        if m.get("role") == "tool":
            out["tool_call_id"] = m.get("tool_call_id") or ""
        if m.get("tool_calls") and self.format is None:
            out["tool_calls"] = [
                {
                    "id": c.get("id") or "",
                    "type": "function",
                    "function": {
                        "name": c["function"]["name"],
                        "arguments": _arguments_json(c["function"].get("arguments")),
                    },
                }
                for c in m["tool_calls"]
            ]
        return out

    # --- requests ----------------------------------------------------------------------------------

    def request_body(
        self, messages: list[dict[str, Any]], schemas: list[dict[str, Any]], params: SamplingParams
    ) -> dict[str, Any]:
        """The JSON of one turn: standard fields only, plus ``top_k`` when it is set (vLLM reads it)."""
        body: dict[str, Any] = {
            "messages": messages,
            "max_tokens": params.max_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
        }
        if self.model:
            body["model"] = self.model
        if self.format is None and schemas:
            body["tools"] = schemas
        body.update(optional_sampling(params))
        body.update(self.extra_body)
        return body

    async def chat(
        self,
        messages: list[dict[str, Any]],
        schemas: list[dict[str, Any]],
        params: SamplingParams,
        request_id: str = "",
    ) -> ChatReply:
        """One assistant turn after ``messages`` (already in the API's form: :meth:`prompt`, :meth:`observation`)."""
        data = await self._post(self.request_body(messages, schemas, params), request_id)
        url = self.url
        choice = first_choice(data, url)
        if "message" not in choice:
            raise EngineError(f"{url}: the answer has no choices[0].message: {snippet(data)}")
        message = typed(choice["message"], (dict,), "choices[0].message", url)
        finish = _FINISH.get(choice.get("finish_reason"))
        if finish is None:
            raise EngineError(
                f"{url}: unexpected finish_reason {choice.get('finish_reason')!r} (expected stop, length or tool_calls)"
            )
        nullable_text = (str, type(None))
        content = typed(message.get("content"), nullable_text, "choices[0].message.content", url) or ""
        raw_calls = typed(message.get("tool_calls"), (list, type(None)), "choices[0].message.tool_calls", url) or []
        reasoning = typed(message.get("reasoning_content"), nullable_text, "choices[0].message.reasoning_content", url)
        reasoning = reasoning or typed(message.get("reasoning"), nullable_text, "choices[0].message.reasoning", url)
        usage = typed(data.get("usage"), (dict, type(None)), "usage", url) or {}
        completion_tokens = typed(usage.get("completion_tokens"), (int, type(None)), "usage.completion_tokens", url)
        calls = [_call(c, i) for i, c in enumerate(raw_calls)] if self.format is None else []
        sent_back: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            sent_back["tool_calls"] = raw_calls
        return ChatReply(
            content=content,
            finish_reason=finish,
            tool_calls=calls,
            reasoning=reasoning,
            completion_tokens=completion_tokens or 0,
            message=sent_back,
        )


def _arguments_json(arguments: Any) -> str:
    return (
        arguments
        if isinstance(arguments, str)
        else json.dumps(arguments if arguments is not None else {}, ensure_ascii=False)
    )


def _call(raw: Any, index: int) -> ToolCall:
    """One entry of ``tool_calls``; arguments that are not a JSON object make an error call, answered as such."""
    from rlfcore.types import ToolCall

    function = raw.get("function") if isinstance(raw, dict) else None
    given_id = raw.get("id") if isinstance(raw, dict) else None
    call_id = given_id if isinstance(given_id, str) and given_id else f"call_{index}"
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        return ToolCall(name="", arguments={}, id=call_id, raw=snippet(raw), error="the call names no function")
    text = function.get("arguments")
    try:
        arguments = loads(text) if isinstance(text, str) else text if text is not None else {}
    except ValueError as exc:
        return ToolCall(
            name=function["name"], arguments={}, id=call_id, raw=str(text), error=f"arguments are not JSON: {exc}"
        )
    if not isinstance(arguments, dict):
        return ToolCall(
            name=function["name"],
            arguments={},
            id=call_id,
            raw=str(text),
            error=f"arguments must be a JSON object, got {type(arguments).__name__}",
        )
    return ToolCall(name=function["name"], arguments=arguments, id=call_id, raw=str(text))
