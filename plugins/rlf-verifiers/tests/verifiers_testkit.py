"""What the plugin's tests share: verifiers from beside the venv (or a skip), and a loopback model that
answers streamed requests, as verifiers' chat program sends them."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from rlfcore.testing import Reply, Responder

SITE = Path(os.environ.get("RLF_VERIFIERS_SITE", Path(__file__).parents[1] / ".site"))
"""Where scripts/install-verifiers.sh puts verifiers apart from the venv (whose mcp and openai it would pin back)."""


def verifiers_or_skip() -> None:
    """Import verifiers from the venv or from :data:`SITE` (after the venv's packages); skip without it, or fail
    where ``RLF_REQUIRE_VERIFIERS=1`` says it must be there."""
    if SITE.is_dir() and str(SITE) not in sys.path:
        sys.path.append(str(SITE))
    try:
        import verifiers.v1  # noqa: F401
    except ImportError as exc:
        why = f"verifiers 0.4 is not importable ({exc}): run plugins/rlf-verifiers/scripts/install-verifiers.sh"
        if os.environ.get("RLF_REQUIRE_VERIFIERS") == "1":
            pytest.fail(why)
        pytest.skip(why)


def streamed(responder: Responder) -> Responder:
    """``responder``'s answers, sent as one server-sent event (a ``chat.completion.chunk``, then ``[DONE]``) to a
    request with ``stream: true``: verifiers' chat program streams every request, and its eval relays the stream."""

    def respond(body: dict[str, Any]) -> Reply:
        got = responder(body)
        reply = Reply(got) if isinstance(got, str) else got
        if not body.get("stream"):
            return reply
        delta: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.tool_calls:
            delta["tool_calls"] = [{**call, "index": i} for i, call in enumerate(reply.tool_calls)]
        chunk = {
            "id": "chatcmpl-loopback",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": body.get("model", ""),
            "choices": [{"index": 0, "delta": delta, "finish_reason": reply.finish_reason}],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        }
        return Reply(raw=f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n")

    return respond
