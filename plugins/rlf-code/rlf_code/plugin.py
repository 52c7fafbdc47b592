"""rlf plugin ``code``: a Python interpreter in a sandbox of its own per trajectory, and rewards from
running the final answer's tests (or checking its program's answer) in a fresh sandbox.

Enable it with ``plugins: [code]``; settings live under ``code:`` (:class:`~rlf_code.settings.Settings`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from rlf_code.checks import BadGroundTruth
from rlf_code.layers import detect
from rlf_code.pool import Pool, Session
from rlf_code.sandbox import Sandbox
from rlf_code.settings import Settings
from rlf_code.tools import make_tools
from rlf_code.verify import verify
from rlfcore import (
    Example,
    Sample,
    Score,
    ScoreContext,
    SetupContext,
    StashKey,
    Tool,
    TurnContext,
    Verification,
    hookimpl,
)

if TYPE_CHECKING:
    import click

NAME = "code"
POOL = StashKey[Pool]("code sandbox pool")
"""The run's warm pool of sandboxes, started on first use, closed by ``shutdown``."""
log = logging.getLogger("rlf_code")


def pool_for(settings: Settings, ctx: TurnContext | ScoreContext) -> Pool:
    def start() -> Pool:
        layers = detect(settings.python) if settings.python else detect()
        log.info("rlf-code sandbox layers: %s", layers.describe(settings.network))
        return Pool(
            lambda: Sandbox(
                settings.limits,
                layers,
                settings.python,
                network=settings.network,
                uid_base=settings.uid_base,
                uid_count=settings.uid_count,
            ),
            settings.pool_size,
        )

    return ctx.stash.start(POOL, start)


@hookimpl
def register_config_schema() -> type[BaseModel]:
    return Settings


@hookimpl
def register_commands() -> dict[str, click.Command]:
    """``rlf code ...``: prepare code and maths datasets (the ``rlf-code`` script's group)."""
    from rlf_code.cli import cli

    return {"code": cli}


@hookimpl
def register_tools(ctx: SetupContext) -> list[Tool]:
    return make_tools(ctx.settings_as(Settings))


@hookimpl
def open_session(ctx: TurnContext) -> Session:
    """The trajectory's interpreter; it is taken from the pool on the first call and killed when the trajectory ends."""
    return Session(pool_for(ctx.settings_as(Settings), ctx))


@hookimpl
async def verify_tool(sample: Sample, ctx: ScoreContext) -> Verification | None:
    """Run the final answer's tests (or its program) in a fresh sandbox."""
    if sample.ground_truth is None:
        return None
    settings = ctx.settings_as(Settings)
    pool = pool_for(settings, ctx)
    try:
        return await asyncio.to_thread(verify, pool, settings, sample.response, sample.ground_truth)
    except BadGroundTruth as exc:
        return Verification(passed=False, details={"stage": "ground_truth"}, error=str(exc))


@hookimpl
def compute_score(verification: Verification | None) -> Score | None:
    """Tests: ``all_pass`` trains, ``pass_fraction`` is logged (weight it with ``reward.weights``).
    Answers: ``correct``. A bad ground truth is a reward error, not a wrong answer."""
    if verification is None:
        return None
    error = verification.error if verification.details.get("stage") == "ground_truth" else None
    passed = float(verification.passed)
    if "pass_fraction" in verification.details:
        components = {"all_pass": passed, "pass_fraction": float(verification.details["pass_fraction"])}
    else:
        components = {"correct": passed}
    return Score(value=passed, components=components, error=error)


@hookimpl
def register_examples() -> list[Example]:
    """A trajectory that computes with the tool, then answers with tests that pass, and one whose tests fail."""
    tests = {"kind": "tests", "entry_point": "add", "tests": ["assert candidate(2, 3) == 5", "assert add(0, 0) == 0"]}
    call = '<tool_call>{"name": "python", "arguments": {"code": "2 + 3"}}</tool_call>'
    right = "```python\ndef add(a, b):\n    return a + b\n```"
    wrong = "```python\ndef add(a, b):\n    return a - b\n```"
    row: dict[str, Any] = {"prompt": "Write add(a, b).", "ground_truth": tests}
    return [
        Example(row={**row, "id": "add"}, script=[call, right], expected_reward=1.0),
        Example(row={**row, "id": "add-wrong"}, script=[call, wrong], expected_reward=0.0),
    ]


@hookimpl
async def shutdown(ctx: SetupContext) -> None:
    """Kill every sandbox the run still holds."""
    pool = ctx.stash.pop(POOL, None)
    if pool is not None:
        await asyncio.to_thread(pool.close)
