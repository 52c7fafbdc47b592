"""The reward of a finished trajectory: the answer's exact match or F1, plus an optional format part."""

from __future__ import annotations

import re

from rlfcore import Sample, Score

from rlf_deepsearch.answers import exact_match, extract_answer, f1_score, gold_answers
from rlf_deepsearch.formats import well_formed
from rlf_deepsearch.settings import Settings

_ANSWER = re.compile(r"<answer>.*?</answer>", re.DOTALL)


def score_sample(sample: Sample, settings: Settings) -> Score | None:
    """``exact_match`` and ``f1`` components always; ``format`` too when ``format_reward`` > 0.

    The value is the configured answer score, or ``(1 - w) * answer + w * format``. In the Search-R1
    format an answer must be inside ``<answer>`` tags (as Search-R1 scores it); with Hermes calls an
    untagged final message counts as the answer. ``None`` when the row has no gold answer.
    """
    golds = gold_answers(sample.ground_truth)
    if not golds:
        return None
    answer = extract_answer(sample.response, require_tags=settings.format == "search-r1")
    em = exact_match(answer, golds) if answer is not None else 0.0
    f1 = f1_score(answer, golds) if answer is not None else 0.0
    value = em if settings.reward == "em" else f1
    components = {"exact_match": em, "f1": f1}
    if settings.format_reward > 0:
        components["format"] = float(format_ok(sample, settings.format))
        value = (1 - settings.format_reward) * value + settings.format_reward * components["format"]
    return Score(value=value, components=components)


def format_ok(sample: Sample, fmt: str) -> bool:
    """Search-R1: every turn is think + one action, searches then an answer. Hermes: the trajectory
    ended on its own, no call failed, and the final message holds exactly one ``<answer>``."""
    if fmt == "search-r1":
        return well_formed([m.get("content") or "" for m in sample.messages if m.get("role") == "assistant"])
    return (
        sample.stop_reason in ("answer", "no_tool_call")
        and sample.tool_errors == 0
        and len(_ANSWER.findall(sample.response)) == 1
    )
