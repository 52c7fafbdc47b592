"""One judge per run: prompts in, verdicts out, mapped to rewards; failures become per-sample errors.

A request whose answer holds no readable verdict is asked again (``parse_retries`` times, with a new
seed when one is set); after that, and after any request failure, each affected sample gets
``Score(0.0, error=...)``. Nothing here raises into the reward pipeline.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from rlf_judge_qwq.cache import VerdictCache, request_key
from rlf_judge_qwq.endpoints import ChatEndpoints, Completion, JudgeRequestError
from rlf_judge_qwq.metrics import JudgeMetrics
from rlf_judge_qwq.prompts import Subject, group_messages, pointwise_messages, subject_of
from rlf_judge_qwq.settings import JudgeSettings
from rlf_judge_qwq.verdict import VerdictError, parse_group, parse_pointwise
from rlfcore import Sample, Score, Stash, StashKey, config_dir, resolve_path

if TYPE_CHECKING:
    from rlfcore import RunConfig

NAME = "judge-qwq"
T = TypeVar("T")


class Backend(Protocol):
    async def complete(self, messages: list[dict[str, Any]], params: dict[str, Any]) -> Completion: ...

    async def aclose(self) -> None: ...


class Judge:
    """Judges the samples of one prompt, pointwise or as a group (``settings.mode``)."""

    def __init__(self, settings: JudgeSettings, base_dir: Path | None = None, backend: Backend | None = None):
        self.settings = settings
        self.metrics = JudgeMetrics()
        self.cache = VerdictCache(settings.cache_size)
        self.backend = backend or _make_backend(settings, base_dir or Path.cwd(), self.metrics)
        self.warned = False

    async def judge_group(self, samples: Sequence[Sample]) -> list[Score | None]:
        """One Score per sample (``error`` set when judging failed); ``None`` for failed rollouts."""
        todo = [i for i, s in enumerate(samples) if s.stop_reason != "error"]
        out: list[Score | None] = [None] * len(samples)
        if not todo:
            return out
        subjects = [subject_of(samples[i], self.settings) for i in todo]
        if self.settings.mode == "group":
            scores = await self._group(subjects)
        else:
            scores = list(await asyncio.gather(*(self._pointwise(s) for s in subjects)))
        for i, score in zip(todo, scores, strict=True):
            out[i] = score
        self.metrics.samples_judged += len(scores)
        self.metrics.samples_failed += sum(1 for s in scores if s.error)
        return out

    def scale(self, grade: float) -> float:
        """A grade on the judge's scale mapped linearly onto ``reward_min..reward_max``."""
        s = self.settings
        frac = (grade - s.score_min) / (s.score_max - s.score_min)
        return s.reward_min + frac * (s.reward_max - s.reward_min)

    def rank(self, grades: list[float]) -> list[float]:
        """Rewards by rank in the group: the best gets ``reward_max``, the worst ``reward_min``, ties share."""
        s, n = self.settings, len(grades)
        if n == 1:
            return [self.scale(grades[0])]
        order = sorted(grades)
        ranks = [(order.index(g) + n - 1 - order[::-1].index(g)) / 2 for g in grades]  # mean position of ties
        return [s.reward_min + r / (n - 1) * (s.reward_max - s.reward_min) for r in ranks]

    def params(self, attempt: int = 0) -> dict[str, Any]:
        """Sampling parameters of one request (the seed moves on with each retry)."""
        s = self.settings
        params: dict[str, Any] = {"temperature": s.temperature, "top_p": s.top_p, "max_tokens": s.max_tokens}
        if s.seed is not None:
            params["seed"] = s.seed + attempt
        params.update(s.extra_body)
        return params

    async def aclose(self) -> None:
        await self.backend.aclose()

    # --- internals -------------------------------------------------------------------------------

    async def _pointwise(self, subject: Subject) -> Score:
        s = self.settings
        messages = pointwise_messages(subject, s)

        def parse(c: Completion) -> float:
            return parse_pointwise(c.content, s.score_min, s.score_max, c.finish_reason)

        try:
            grade = await self._ask(messages, parse)
        except Exception as exc:  # any failure costs this sample its judge reward, never the step
            return Score(0.0, error=_describe(exc))
        return Score(self.scale(grade))

    async def _group(self, subjects: list[Subject]) -> list[Score]:
        s, n = self.settings, len(subjects)
        messages = group_messages(subjects, s)

        def parse(c: Completion) -> list[float]:
            return parse_group(c.content, n, s.score_min, s.score_max, c.finish_reason)

        try:
            grades = await self._ask(messages, parse)
        except Exception as exc:
            return [Score(0.0, error=_describe(exc)) for _ in subjects]
        rewards = self.rank(grades) if s.group_reward == "rank" else [self.scale(g) for g in grades]
        return [Score(r) for r in rewards]

    async def _ask(self, messages: list[dict[str, Any]], parse: Callable[[Completion], T]) -> T:
        key = request_key(self.settings.model, messages, self.params())
        value, source = await self.cache.get_or_compute(key, lambda: self._ask_fresh(messages, parse))
        if source == "hit":
            self.metrics.cache_hits += 1
        elif source == "shared":
            self.metrics.shared_in_flight += 1
        return value

    async def _ask_fresh(self, messages: list[dict[str, Any]], parse: Callable[[Completion], T]) -> T:
        attempts = self.settings.parse_retries + 1
        problem = ""
        for attempt in range(attempts):
            completion = await self.backend.complete(messages, self.params(attempt))
            try:
                return parse(completion)
            except VerdictError as exc:
                self.metrics.errors["unreadable"] += 1
                problem = str(exc)
        raise VerdictError(f"unreadable verdict in all {attempts} answers; last: {problem}")


JUDGE = StashKey[Judge]("judge-qwq judge")
"""The run's judge for its configured endpoints (or in-process model)."""
SERVED = StashKey[Judge]("judge-qwq served judge")
"""The run's judge for the endpoints the trainer serves (verl's reward router)."""


def judge_for(config: RunConfig | None, stash: Stash, served: Sequence[str] = ()) -> Judge | None:
    """The run's judge, kept in the plugin's ``stash`` (made on first use), or ``None`` when it has
    nothing to ask: no ``judge-qwq`` section validated for this run, or the ``openai`` backend with
    no endpoint. :func:`close_judges` releases what the stash holds.

    ``served`` are endpoints the trainer serves itself (verl's reward router, from
    ``ScoreContext.judge_endpoints``); they are used when ``judge-qwq.endpoints`` is empty.
    """
    settings = config.settings(NAME) if config is not None else None
    if not isinstance(settings, JudgeSettings):
        return None
    if settings.backend == "openai" and not settings.endpoints:
        if not served:
            return None
        judge = stash.get(SERVED, None)
        if judge is None or judge.settings.endpoints != list(served):
            stash[SERVED] = Judge(settings.model_copy(update={"endpoints": list(served)}), _base_dir(config))
        return stash[SERVED]
    return stash.start(JUDGE, lambda: Judge(settings, _base_dir(config)))


async def close_judges(stash: Stash) -> None:
    """Close the connection pools of the judges in ``stash`` and drop them (the plugin's ``shutdown``)."""
    for key in (JUDGE, SERVED):
        judge = stash.pop(key, None)
        if judge is not None:
            await judge.backend.aclose()


def _base_dir(config: RunConfig | None) -> Path:
    return config_dir(config)


def _make_backend(settings: JudgeSettings, base_dir: Path, metrics: JudgeMetrics) -> Backend:
    if settings.backend == "transformers":
        from rlf_judge_qwq.local import TransformersJudge

        return TransformersJudge(resolve_path(settings.model_path or "", base_dir), metrics, settings.device)
    return ChatEndpoints(settings, metrics)


def _describe(exc: Exception) -> str:
    known = isinstance(exc, (VerdictError, JudgeRequestError))
    return f"{NAME}: {exc}" if known else f"{NAME}: {type(exc).__name__}: {exc}"
