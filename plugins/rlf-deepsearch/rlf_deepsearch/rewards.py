"""The reward of a finished trajectory: the answer's exact match or F1, plus an optional format part."""

from __future__ import annotations

import re

from rlf_deepsearch.answers import exact_match, extract_answer, f1_score, gold_answers, normalize_answer
from rlf_deepsearch.formats import valid_sequence, well_formed
from rlf_deepsearch.settings import Settings
from rlfcore import Sample, Score

_ANSWER = re.compile(r"<answer>.*?</answer>", re.DOTALL)
_INFORMATION = re.compile(r"<information>(.*?)</information>", re.DOTALL)


def score_sample(sample: Sample, settings: Settings) -> Score | None:
    """``exact_match`` and ``f1`` components always; ``format`` too when ``format_reward`` > 0.

    The value is the configured answer score, or ``(1 - w) * answer + w * format``. In the Search-R1
    format an answer must be inside ``<answer>`` tags (as Search-R1 scores it); with Hermes calls an
    untagged final message counts as the answer. ``None`` when the row has no gold answer.
    ``reward: search-r1`` is Search-R1's own rule instead (:func:`search_r1_score`), with ``format``
    and ``retrieval`` components.
    """
    golds = gold_answers(sample.ground_truth)
    if not golds:
        return None
    answer = extract_answer(sample.response, require_tags="search-r1" in (settings.format, settings.reward))
    em = exact_match(answer, golds) if answer is not None else 0.0
    f1 = f1_score(answer, golds) if answer is not None else 0.0
    components = {"exact_match": em, "f1": f1}
    if settings.reward == "search-r1":
        return search_r1_score(sample.response, answer, golds, em, settings, components)
    value = em if settings.reward == "em" else f1
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


def search_r1_score(
    response: str, answer: str | None, golds: list[str], em: float, settings: Settings, components: dict[str, float]
) -> Score:
    """Search-R1's ``compute_score_em`` (``qa_em_format.py``) on the assistant's whole turn.

    A right answer earns 1 (1 - structure_format_score when the turn breaks the format); otherwise a
    well-formed turn earns structure_format_score, plus retrieval_score when a gold answer appears
    in an ``<information>`` block; a badly formed turn with a wrong answer earns final_format_score,
    one with no answer 0.
    """
    valid = valid_sequence(response)
    retrieved = valid and any(
        normalize_answer(g) in normalize_answer(block.strip())
        for block in _INFORMATION.findall(response)
        for g in golds
    )
    components.update(format=float(valid), retrieval=float(retrieved))
    partial = settings.structure_format_score + (settings.retrieval_score if retrieved else 0.0)
    if answer is not None and em:
        value = 1.0 if valid else 1.0 - settings.structure_format_score
    elif valid:
        value = partial
    else:
        value = settings.final_format_score if answer is not None else 0.0
    return Score(value=value, components=components)
