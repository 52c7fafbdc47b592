"""Built-in plugin ``rlf.scoring``: exact match of the final answer, the reward when no plugin gives one."""

from __future__ import annotations

import re
from typing import Any

from rlfcore.hookspecs import hookimpl
from rlfcore.types import Sample, Score

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)


def final_answer(response: str) -> str:
    """The last ``<answer>...</answer>`` of a response, else the response without its reasoning."""
    found: list[str] = _ANSWER.findall(response)  # one group: each match is its text
    if found:
        return found[-1].strip()
    return _THINK.sub("", response).strip()


def normalize(text: Any) -> str:
    return " ".join(str(text).split()).casefold()


@hookimpl(trylast=True)
def compute_score(sample: Sample) -> Score | None:
    if sample.ground_truth is None:
        return None
    golds = sample.ground_truth if isinstance(sample.ground_truth, (list, tuple)) else [sample.ground_truth]
    answer = normalize(final_answer(sample.response))
    value = float(any(answer == normalize(g) for g in golds))
    return Score(value=value, components={"exact_match": value})
