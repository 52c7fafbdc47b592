"""Making :class:`~rlfcore.types.Tool` objects from plain functions and from qwen-agent tools.

A tool author writes a type-hinted function; the model needs a JSON schema of its arguments. pydantic
derives the schema from the signature (so the model sees exactly what the function accepts) and
validates each call's arguments into the annotated types before the function runs.
"""

from __future__ import annotations

import inspect
import json
import re
import types
import typing
from collections.abc import Callable
from typing import Any, cast, overload

from pydantic import TypeAdapter, validate_call

from rlfcore.types import Tool

SESSION = "session"
"""The parameter through which a tool receives its trajectory's session."""
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_ARGS_HEADERS = ("args:", "arguments:", "parameters:", "params:")
_LITERAL_KEYS = ("default", "const", "enum", "examples")
"""Schema keywords whose values are data, not subschemas: their ``title`` keys are kept."""
_NAMED_SCHEMAS = ("properties", "patternProperties", "$defs", "definitions")


@overload
def tool(
    fn: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_s: float | None = None,
    max_concurrency: int | None = None,
) -> Tool: ...


@overload
def tool(
    fn: None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_s: float | None = None,
    max_concurrency: int | None = None,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_s: float | None = None,
    max_concurrency: int | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Turn a sync or async function into a Tool: ``@tool`` or ``@tool(name=..., timeout_s=...)``.

    The parameters' schema comes from the type hints (parameters without a default are required);
    the description is the docstring's first paragraph, and a Google-style ``Args:`` section gives
    each parameter's description. Arguments are validated into the annotated types on each call.
    A parameter named ``session`` is not the model's: it receives the calling trajectory's session
    (what the plugin's ``open_session`` hook opened), and the schema leaves it out.
    """

    def build(f: Callable[..., Any]) -> Tool:
        tool_name = name if name else str(getattr(f, "__name__", ""))
        if not _NAME.match(tool_name):
            raise ValueError(f"tool name {tool_name!r} must be 1-64 letters, digits, '_' or '-'")
        _check_signature(f, tool_name)
        doc = inspect.getdoc(f) or ""
        takes_session = SESSION in inspect.signature(f).parameters
        model_args = _without_session(f) if takes_session else f
        try:
            parameters = function_schema(model_args)
        except Exception as exc:  # pydantic raises several kinds; the message names the bad annotation
            raise TypeError(f"tool {tool_name!r}: cannot derive a JSON schema from its signature: {exc}") from exc
        for arg, text in _arg_docs(doc).items():
            prop = parameters.get("properties", {}).get(arg)
            if isinstance(prop, dict):
                prop.setdefault("description", text)
        return Tool(
            name=tool_name,
            description=description if description is not None else _first_paragraph(doc),
            parameters=parameters,
            fn=_with_session(f, validate_call(model_args)) if takes_session else validate_call(f),
            timeout_s=timeout_s,
            max_concurrency=max_concurrency,
            takes_session=takes_session,
        )

    return build(fn) if fn is not None else build


def _without_session(fn: Callable[..., Any]) -> Callable[..., dict[str, Any]]:
    """A stand-in with ``fn``'s parameters but ``session``, answering with its validated arguments:
    the model's schema and the validation of its arguments come from it."""
    # The session's type may be imported for type checking only: resolve the other annotations alone.
    own = {k: v for k, v in getattr(fn, "__annotations__", {}).items() if k not in (SESSION, "return")}
    hints = typing.get_type_hints(
        types.SimpleNamespace(__annotations__=own), globalns=getattr(fn, "__globals__", None), include_extras=True
    )
    params = [
        p.replace(kind=p.KEYWORD_ONLY, annotation=hints.get(p.name, p.annotation))
        for p in inspect.signature(fn).parameters.values()
        if p.name != SESSION and p.kind is not p.VAR_KEYWORD
    ]

    def arguments(**kwargs: Any) -> dict[str, Any]:
        return kwargs

    arguments.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]  # read by inspect.signature; no function declares it
    arguments.__annotations__ = {p.name: p.annotation for p in params if p.annotation is not p.empty}
    arguments.__name__ = arguments.__qualname__ = getattr(fn, "__name__", "tool")  # named in validation errors
    return arguments


def _with_session(fn: Callable[..., Any], validated: Callable[..., dict[str, Any]]) -> Callable[..., Any]:
    """``fn`` called with the session and the model's arguments validated without it; async if ``fn`` is."""
    if inspect.iscoroutinefunction(fn):

        async def call_async(*, session: Any, **arguments: Any) -> Any:
            return await fn(session=session, **validated(**arguments))

        return call_async

    def call(*, session: Any, **arguments: Any) -> Any:
        return fn(session=session, **validated(**arguments))

    return call


def function_schema(fn: Callable[..., Any]) -> dict[str, Any]:
    """The JSON schema of a function's keyword arguments, without pydantic's ``title`` noise."""
    schema: dict[str, Any] = _drop_titles(TypeAdapter(cast(Any, fn)).json_schema())  # takes a function, typed for types
    return schema


def _check_signature(fn: Callable[..., Any], tool_name: str) -> None:
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.POSITIONAL_ONLY, param.VAR_POSITIONAL):
            raise ValueError(
                f"tool {tool_name!r}: parameter {param.name!r} is positional-only or *args; "
                "a tool is called with keyword arguments only"
            )


def _drop_titles(schema: Any) -> Any:
    if isinstance(schema, list):
        return [_drop_titles(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in _NAMED_SCHEMAS and isinstance(value, dict):  # keys here are names, not keywords
            out[key] = {name: _drop_titles(sub) for name, sub in value.items()}
        else:
            out[key] = value if key in _LITERAL_KEYS else _drop_titles(value)
    return out


def _first_paragraph(doc: str) -> str:
    return " ".join(doc.strip().split("\n\n", 1)[0].split())


def _arg_docs(doc: str) -> dict[str, str]:
    """Parameter descriptions from a Google-style ``Args:`` section: ``name (type): text``."""
    out: dict[str, str] = {}
    lines = doc.splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip().lower() in _ARGS_HEADERS]
    if not starts:
        return out
    indent: int | None = None
    current: str | None = None
    for line in lines[starts[0] + 1 :]:
        if not line.strip():
            continue
        width = len(line) - len(line.lstrip())
        if indent is None:
            indent = width
        if width < indent or (width == 0 and line.rstrip().endswith(":")):
            break
        match = re.match(r"^(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$", line.strip())
        if width == indent and match:
            current = match.group(1).lstrip("*")
            out[current] = match.group(2).strip()
        elif current is not None:
            out[current] = f"{out[current]} {line.strip()}".strip()
    return out


# --- qwen-agent --------------------------------------------------------------------------------------


def tool_from_qwen_agent(obj: Any, *, timeout_s: float | None = None, max_concurrency: int | None = None) -> Tool:
    """Adapt a qwen-agent ``BaseTool`` instance (duck-typed: qwen_agent is never imported here).

    Its ``parameters`` may be a JSON schema or qwen-agent's older list of ``{"name", "type",
    "description", "required"}`` entries. The tool is called the way qwen-agent's own agents call it,
    with the arguments as a JSON string; lists of content items come back as their text.
    """
    tool_name = getattr(obj, "name", None)
    call = getattr(obj, "call", None)
    if not isinstance(tool_name, str) or not tool_name or not callable(call):
        raise TypeError(
            f"expected a qwen-agent BaseTool instance with a `name` and a `call` method, got {type(obj).__name__}"
        )
    params = getattr(obj, "parameters", None) or {"type": "object", "properties": {}}
    if isinstance(params, list):
        params = _schema_from_param_list(params, tool_name)
    elif not isinstance(params, dict):
        raise TypeError(
            f"qwen-agent tool {tool_name!r}: parameters must be a dict or a list, got {type(params).__name__}"
        )

    def invoke(**arguments: Any) -> Any:
        return _qwen_output(call(json.dumps(arguments, ensure_ascii=False)))

    return Tool(
        name=tool_name,
        description=getattr(obj, "description", "") or "",
        parameters=params,
        fn=invoke,
        timeout_s=timeout_s,
        max_concurrency=max_concurrency,
    )


def _schema_from_param_list(params: list[Any], tool_name: str) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    required: list[str] = []
    for i, param in enumerate(params):
        if not isinstance(param, dict) or not isinstance(param.get("name"), str):
            raise TypeError(f"qwen-agent tool {tool_name!r}: parameters[{i}] needs a string 'name', got {param!r}")
        properties[param["name"]] = {k: v for k, v in param.items() if k not in ("name", "required")}
        if param.get("required"):
            required.append(param["name"])
    return {"type": "object", "properties": properties, "required": required}


def _qwen_output(result: Any) -> Any:
    """qwen-agent tools may answer with ``ContentItem``s (text, image, file...): the model reads text."""
    if isinstance(result, list) and result and all(hasattr(item, "get_type_and_value") for item in result):
        parts = []
        for item in result:
            kind, value = item.get_type_and_value()
            parts.append(value if kind == "text" else f"[{kind}: {value}]")
        return "\n".join(parts)
    return result
