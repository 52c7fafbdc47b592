"""One trajectory's tokens for the token view: text, loss mask, logprob and the template check, and
an agent episode's segments (each token sequence the agent started anew, with why).

The tokenizer comes from the run itself (the newest checkpoint's model folder, else ``model.tokenizer``
or ``model.path`` when they are absolute paths); without one the view shows token ids.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

_TOKEN_AT = re.compile(r"token (\d+)")


@dataclass
class Token:
    index: int
    id: int
    text: str
    part: str  # prompt, generated (loss mask 1) or observation (loss mask 0)
    logprob: float | None
    mismatch: bool

    @property
    def heat(self) -> float:
        """0 (certain) to 1 (logprob -5 or lower), for the heat-map colour of generated tokens."""
        return 0.0 if self.logprob is None else min(1.0, max(0.0, -self.logprob / 5.0))

    @property
    def prob(self) -> float | None:
        return None if self.logprob is None else math.exp(self.logprob)


def tokenizer_dir(run: Path, config: dict[str, Any]) -> Path | None:
    """Where the run's tokenizer is: the newest checkpoint's model, else an absolute model path."""
    ckpts = sorted((run / "checkpoints").glob("*/model/tokenizer_config.json"), key=lambda p: p.stat().st_mtime)
    if ckpts:
        return ckpts[-1].parent
    model = config.get("model")
    model = model if isinstance(model, dict) else {}
    for key in ("tokenizer", "path"):
        value = model.get(key)
        if isinstance(value, str) and Path(value).is_absolute() and (Path(value) / "tokenizer_config.json").exists():
            return Path(value)
    return None


@lru_cache(maxsize=8)
def load(path: str) -> Any:
    """The folder's ``tokenizer.json`` through ``tokenizers`` (fast to import), else transformers."""
    if (Path(path) / "tokenizer.json").exists():
        from tokenizers import Tokenizer

        return Tokenizer.from_file(str(Path(path) / "tokenizer.json"))
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path, local_files_only=True)


def mismatch_at(reason: str | None, length: int) -> int | None:
    """The first token where the rollout departs from a full rendering, read from the check's reason."""
    if not reason:
        return None
    found = _TOKEN_AT.search(reason)  # "token 57: ..." or "a full rendering ends at token 57, ..."
    return min(int(found.group(1)), length) if found else None


@dataclass
class Segment:
    """One token sequence of an agent episode: why the agent began it, its counts, and (on the token
    view) its tokens; the last is the record's own token fields."""

    number: int
    reason: str | None
    last: bool
    prompt: int
    generated: int
    observed: int
    tokens: list[Token]


def tokens(record: dict[str, Any], tokenizer: Any | None, window: int = 12) -> tuple[list[Token], int | None]:
    """The tokens of ``record`` in order, and the index where the template check found a departure."""
    prompt, response, mask, logprobs = _fields(record)
    ids = prompt + response
    at = mismatch_at(record.get("template_mismatch"), len(ids))
    texts = _pieces(ids, tokenizer)
    out = []
    for i, (tid, text) in enumerate(zip(ids, texts)):
        if i < len(prompt):
            part, lp = "prompt", None
        else:
            j = i - len(prompt)
            gen = j < len(mask) and mask[j] == 1
            part = "generated" if gen else "observation"
            lp = logprobs[j] if gen and j < len(logprobs) and isinstance(logprobs[j], (int, float)) else None
        out.append(Token(i, tid, text, part, lp, at is not None and at <= i < at + window))
    return out, at


def segments(record: dict[str, Any], tokenizer: Any | None = None, own: list[Token] | None = None) -> list[Segment]:
    """An agent episode's segments in order, the record's own last; none for an ordinary trajectory.

    With ``own`` (the record's tokens from :func:`tokens`) each segment carries its tokens, the earlier
    ones decoded with ``tokenizer``; without it only counts (the sample page decodes nothing).
    """
    earlier = record.get("segments")
    earlier = earlier if isinstance(earlier, list) else []
    if not earlier and record.get("segment_reason") is None:
        return []
    parts = [s if isinstance(s, dict) else {} for s in earlier] + [record]
    out = []
    for n, part in enumerate(parts, 1):
        last = n == len(parts)
        prompt, response, mask, _ = _fields(part)
        generated = sum(1 for m in mask[: len(response)] if m == 1)
        if own is None:
            toks = []
        elif last:
            toks = own
        else:
            toks = tokens(part, tokenizer)[0]
        reason = record.get("segment_reason") if last else part.get("reason")
        reason = None if reason is None else str(reason)
        out.append(Segment(n, reason, last, len(prompt), generated, len(response) - generated, toks))
    return out


def _fields(record: dict[str, Any]) -> tuple[list[int], list[int], list[Any], list[Any]]:
    """A record's (or segment's) token fields as lists (a field that is not one counts as empty), with
    ids that are not integers left out."""
    prompt, response, mask, logprobs = (
        v if isinstance(v, list) else []
        for v in (record.get(k) for k in ("prompt_ids", "response_ids", "response_mask", "logprobs"))
    )
    return [i for i in prompt if isinstance(i, int)], [i for i in response if isinstance(i, int)], mask, logprobs


def _pieces(ids: list[int], tokenizer: Any | None) -> list[str]:
    if tokenizer is None:
        return [f"[{i}]" for i in ids]
    if hasattr(tokenizer, "decode_batch"):  # tokenizers: one call for the whole sequence
        return list(tokenizer.decode_batch([[i] for i in ids], skip_special_tokens=False))
    return [tokenizer.decode([i], skip_special_tokens=False) for i in ids]
