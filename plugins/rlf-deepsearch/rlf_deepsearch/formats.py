"""Search-R1's tag format: ``<search>query</search>`` calls, ``<information>`` results, ``<answer>`` ends.

As Search-R1 runs it (``search_r1/llm_agent/generation.py``): generation stops at ``</search>`` or
``</answer>`` (``rollout.sampling.stop``), the first ``<search>`` or ``<answer>`` block of the turn is
the action, and the observation is raw text appended inside the same assistant turn, with no chat
template around it: ``"\\n\\n<information>{passages}</information>\\n\\n"`` after a search, a fixed
reminder after a turn with neither tag. The search is an ordinary tool call, so the core's executor
runs it with its timeouts, retries and cache.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from rlfcore import Message, ToolCall, ToolResult, continuation

if TYPE_CHECKING:
    from rlf_deepsearch.corpus import Passage

_ACTION = re.compile(r"<(search|answer)>(.*?)</\1>", re.DOTALL)
_TAG = re.compile(r"(</?(?:think|search|information|answer)>)")

SEARCH_TOOL = "search"
STOP = ("</search>", "</answer>")
"""The stop strings Search-R1's turns end at; ``format: search-r1`` needs them in ``rollout.sampling.stop``."""
NO_ACTION = "the response has neither <search>...</search> nor <answer>...</answer>"
INVALID_ACTION = (
    "\nMy previous action is invalid. If I want to search, I should put the query between <search> and "
    "</search>. If I want to give the final answer, I should put the answer between <answer> and </answer>. "
    "Let me try again.\n"
)
"""Search-R1's observation after a turn with no action, word for word."""


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


def information_observation(results: list[ToolResult]) -> list[Message]:
    """The observation of one turn as raw text continuing the assistant's turn, as Search-R1 appends it."""
    if any(r.error == "malformed" for r in results):
        return [continuation(INVALID_ACTION)]
    body = "\n".join(r.content.strip() for r in results)
    return [continuation(f"\n\n<information>{body}</information>\n\n")]


def search_r1_passages(passages: list[Passage], max_chars: int) -> str:
    """Passages as Search-R1's ``_passages2string`` writes them: ``Doc i(Title: <first line of contents>)
    <rest>`` and a newline each. Over ``max_chars`` the text is cut at a word and ends in "..."."""
    if not passages:
        return "No passages found."
    out = ""
    for i, p in enumerate(passages, 1):
        title, _, text = p.contents.partition("\n")
        out += f"Doc {i}(Title: {title}) {text}\n"
    if len(out) > max_chars:
        out = out[: max_chars - 3].rsplit(" ", 1)[0] + "..."
    return out


_NEXT = {
    ("start", "<think>"): "in_think",
    ("information", "<think>"): "in_think",
    ("in_think", "</think>"): "after_think",
    ("after_think", "<search>"): "in_search",
    ("in_search", "</search>"): "after_search",
    ("after_search", "<information>"): "in_information",
    ("in_information", "</information>"): "information",
    ("after_think", "<answer>"): "in_answer",
    ("in_answer", "</answer>"): "end",
}
_INSIDE = {"in_think", "in_search", "in_information", "in_answer"}


def valid_sequence(response: str) -> bool:
    """Search-R1's format rule (``is_valid_sequence``) on the assistant's whole turn: think, then search
    and its information, think again, ..., think and answer; only whitespace between the tags."""
    state = "start"
    for part in _TAG.split(response):
        if _TAG.fullmatch(part):
            state = _NEXT.get((state, part), "invalid")
            if state == "invalid":
                return False
        elif part.strip() and state not in _INSIDE:
            return False
    return state == "end"


def well_formed(assistant_texts: list[str]) -> bool:
    """The ``format_reward`` check of the search-r1 format: the turn (all of it, observations
    included) follows Search-R1's rule."""
    return bool(assistant_texts) and valid_sequence("".join(assistant_texts))
