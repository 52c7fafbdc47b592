"""QA answer scoring: the SQuAD / NQ normalisation, exact match and token F1 against several golds.

Normalisation is the one every open-domain QA paper reports with (lower case, no punctuation, no
articles, single spaces). F1 follows HotpotQA's official rule for yes/no answers: when either side
normalises to ``yes``, ``no`` or ``noanswer`` and the two differ, F1 is 0, not partial credit.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable
from typing import Any

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)
_CLOSED_CLASS = ("yes", "no", "noanswer")


def normalize_answer(text: str) -> str:
    """Lower case, drop punctuation and the articles a/an/the, collapse whitespace."""
    return " ".join(_ARTICLES.sub(" ", text.lower().translate(_PUNCT)).split())


def gold_answers(ground_truth: Any) -> list[str]:
    """The gold answers of a row, whatever its layout.

    Accepts a string, a list of strings, or a mapping with ``target`` (Search-R1's
    ``reward_model.ground_truth``), ``answers`` or ``answer``.
    """
    if isinstance(ground_truth, dict):
        for key in ("target", "answers", "answer"):
            if key in ground_truth:
                return gold_answers(ground_truth[key])
        raise ValueError(f"ground truth {ground_truth!r:.80} has none of the keys target, answers, answer")
    if ground_truth is None:
        return []
    if isinstance(ground_truth, str):
        return [ground_truth]
    if hasattr(ground_truth, "tolist"):  # numpy arrays from parquet
        ground_truth = ground_truth.tolist()
    if isinstance(ground_truth, (list, tuple)):
        return [str(g) for g in ground_truth]
    return [str(ground_truth)]


def exact_match(prediction: str, golds: Iterable[str]) -> float:
    """1.0 when the prediction equals any gold answer after normalisation."""
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(g) for g in golds))


def f1_score(prediction: str, golds: Iterable[str]) -> float:
    """The best token-level F1 of the prediction against the gold answers."""
    return max((_f1(prediction, g) for g in golds), default=0.0)


def _f1(prediction: str, gold: str) -> float:
    pred, ref = normalize_answer(prediction), normalize_answer(gold)
    if (pred in _CLOSED_CLASS or ref in _CLOSED_CLASS) and pred != ref:
        return 0.0
    pred_tokens, ref_tokens = pred.split(), ref.split()
    common = sum((Counter(pred_tokens) & Counter(ref_tokens)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred_tokens), common / len(ref_tokens)
    return 2 * precision * recall / (precision + recall)


def extract_answer(response: str, require_tags: bool) -> str | None:
    """The last ``<answer>...</answer>`` of a response; without one, the response minus its
    ``<think>`` blocks, or ``None`` when ``require_tags`` (Search-R1 scores untagged answers 0)."""
    found: list[str] = _ANSWER.findall(response)  # one group: each match is its text
    if found:
        return found[-1].strip()
    if require_tags:
        return None
    return _THINK.sub("", response).strip()
