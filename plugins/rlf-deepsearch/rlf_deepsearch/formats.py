"""Search-R1's tag format: ``<search>query</search>`` calls, ``<information>`` results, ``<answer>`` ends.

Search-R1 reads the first ``<search>`` or ``<answer>`` block of a response; a response with neither
is an invalid action, answered with a reminder of the format and the trajectory goes on. The same
happens here, through the loop's hooks: the search is an ordinary tool call (so the core's executor
runs it, with its timeouts and retries), the reminder is the result of an unreadable call.

One difference is unavoidable without a core change: Search-R1 appends the ``<information>`` block
as raw text inside the assistant's turn, while rlf appends observations as chat messages rendered by
the model's template. The block therefore arrives as a user message of its own (see the README).
"""

from __future__ import annotations

import re

from rlfcore import ToolCall, ToolResult

_ACTION = re.compile(r"<(search|answer)>(.*?)</\1>", re.DOTALL)
_TURN = re.compile(r"\s*(?:<think>.*?</think>\s*)?<(search|answer)>(?:(?!</?(?:search|answer|think)>).)*?</\1>\s*", re.DOTALL)

SEARCH_TOOL = "search"
NO_ACTION = "the response has neither <search>...</search> nor <answer>...</answer>"
INVALID_ACTION = (
    "That action is invalid. To search, put the query between <search> and </search>. "
    "To give the final answer, put it between <answer> and </answer>. Try again."
)


def parse_search_r1(text: str) -> list[ToolCall]:
    """The search the response asks for (``[]`` when it answers), or an unreadable call when it does neither.

    ``raw`` stays empty: the tags are the model's own text and are kept verbatim in its message.
    """
    match = _ACTION.search(text)
    if match is None:
        return [ToolCall(name=SEARCH_TOOL, arguments={}, id="call_0", error=NO_ACTION)]
    if match.group(1) == "answer":
        return []
    return [ToolCall(name=SEARCH_TOOL, arguments={"query": match.group(2).strip()}, id="call_0")]


def information_message(results: list[ToolResult]) -> dict[str, str]:
    """The observation of one turn: the results in an ``<information>`` block, or the invalid-action note."""
    if any(r.error == "malformed" for r in results):
        return {"role": "user", "content": INVALID_ACTION}
    body = "\n".join(r.content.strip() for r in results)
    return {"role": "user", "content": f"<information>{body}</information>"}


def well_formed(assistant_texts: list[str]) -> bool:
    """Search-R1's format: each turn is an optional ``<think>`` block and one action, searches first,
    an answer last, nothing outside the tags."""
    if not assistant_texts:
        return False
    actions = []
    for text in assistant_texts:
        match = _TURN.fullmatch(text)
        if match is None:
            return False
        actions.append(match.group(1))
    return actions[-1] == "answer" and all(a == "search" for a in actions[:-1])
