"""Finding the SQL in the model's final message.

Models answer in three shapes, and :func:`extract_sql` reads them in this order:

1. ``<answer>...</answer>``: the last such tag (inside it, a ```` ```sql ```` fence is unwrapped);
2. a fenced code block: the last one labelled ``sql`` (or ``sqlite``), else the last unlabelled one
   (which does not count as the ``sql_fence`` format);
3. plain text: from the first line that starts with ``SELECT`` or ``WITH`` (after an optional
   ``SQL:`` label), up to the first ``;`` outside strings, or to the end.

Reasoning in ``<think>...</think>`` is ignored first (and everything before a lone ``</think>``, as
when the chat template opened the block), so SQL drafted while thinking is never taken as the answer.
Only the first statement of what is found is kept. The format component of the reward checks that
the answer came in the configured shape (:data:`FORMATS`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from rlf_nl2sql.sqltext import first_statement

AnswerFormat = Literal["sql_fence", "answer_tag", "plain"]
Shape = Literal["sql_fence", "code_fence", "answer_tag", "plain"]
FORMATS: dict[str, str] = {
    "sql_fence": "Give your final answer as one SQLite query in a ```sql code block.",
    "answer_tag": "Give your final answer as one SQLite query inside <answer></answer> tags.",
    "plain": "Give your final answer as one SQLite query, with nothing else in your last message.",
}
"""Each answer format and the instruction that asks for it (the preparation command puts it in prompts)."""

_THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.DOTALL | re.IGNORECASE)
_ANSWER = re.compile(r"<answer>(.*?)(?:</answer>|\Z)", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
_PLAIN_START = re.compile(r"^[ \t>*]*(?:sql\s*:\s*)?((?:SELECT|WITH)\b)", re.IGNORECASE | re.MULTILINE)
_SQL_LABELS = ("sql", "sqlite", "sqlite3")


@dataclass(frozen=True)
class Extraction:
    """The SQL found (``""`` when none) and the shape it came in."""

    sql: str
    shape: Shape | None

    def follows(self, expected: AnswerFormat) -> bool:
        """Whether an answer was found in the expected shape (``plain`` accepts any shape)."""
        return bool(self.sql) and expected in ("plain", self.shape)


def extract_sql(response: str) -> Extraction:
    """The SQL of a final message; see the module docstring for the rules."""
    text = _without_reasoning(response)
    tags = _ANSWER.findall(text)
    if tags:
        inner = tags[-1]
        fenced = _fenced(inner)
        return Extraction(first_statement(fenced[0] if fenced else inner), "answer_tag")
    fenced = _fenced(text)
    if fenced:
        body, labelled = fenced
        return Extraction(first_statement(body), "sql_fence" if labelled else "code_fence")
    match = _PLAIN_START.search(text)
    if match:
        return Extraction(first_statement(text[match.start(1) :]), "plain")
    return Extraction("", None)


def _without_reasoning(text: str) -> str:
    lower = text.lower()
    if "</think>" in lower and "<think>" not in lower[: lower.rfind("</think>")]:
        text = text[lower.rfind("</think>") + len("</think>") :]
    return _THINK.sub("", text)


def _fenced(text: str) -> tuple[str, bool] | None:
    """The last ```sql block of ``text`` (labelled: true), else its last unlabelled block, else ``None``."""
    blocks = _FENCE.findall(text)
    for label, body in reversed(blocks):
        if label.lower() in _SQL_LABELS:
            return body, True
    for label, body in reversed(blocks):
        if not label:
            return body, False
    return None
