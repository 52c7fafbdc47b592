"""rlf plugin ``nl2sql``: the model explores a SQLite database with a read-only ``sql`` tool and answers
with one query; the reward is whether that query returns what the gold query returns.

Enable it with ``plugins: [nl2sql]``; settings live under ``nl2sql:`` (:class:`~rlf_nl2sql.settings.Settings`).
Each dataset row names its database in ``extra.db`` (relative to ``nl2sql.db_root``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from rlf_nl2sql.database import DatabaseUnavailable
from rlf_nl2sql.settings import Locator, Settings, base_dir
from rlf_nl2sql.tools import DatabaseSession, make_tools
from rlf_nl2sql.verify import Verifier
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

NAME = "nl2sql"
"""The entry-point name, which is also the config section's."""
INFRASTRUCTURE_STAGES = ("gold", "database")
"""Verification failures that are the data's fault, not the model's: recorded as reward errors."""
VERIFIER = StashKey[Verifier]("nl2sql verifier")
"""The run's verifier (its pool and gold cache), shared by every sample, started by the first ``verify_tool``."""


@hookimpl
def register_config_schema() -> type[BaseModel]:
    return Settings


@hookimpl
def register_commands() -> dict[str, click.Command]:
    """``rlf nl2sql ...``: prepare NL2SQL datasets, write the shop demo (the ``rlf-nl2sql`` script's group)."""
    from rlf_nl2sql.cli import cli

    return {"nl2sql": cli}


@hookimpl
def register_tools(ctx: SetupContext) -> list[Tool]:
    settings = ctx.settings_as(Settings)
    return make_tools(settings, Locator.from_settings(settings, base_dir(ctx.config)))


@hookimpl
async def open_session(row: Mapping[str, Any], ctx: TurnContext) -> DatabaseSession:
    """The trajectory's database, from its row's ``extra.db``: what the ``sql`` and ``schema`` tools query."""
    return DatabaseSession.for_row(Locator.from_settings(ctx.settings_as(Settings), base_dir(ctx.config)), row)


@hookimpl
async def verify_tool(sample: Sample, ctx: ScoreContext) -> Verification | None:
    """Run the final answer's SQL and the gold SQL on the sample's database and compare the results."""
    if sample.ground_truth is None:
        return None
    settings = ctx.settings_as(Settings)
    try:
        db = Locator.from_settings(settings, base_dir(ctx.config)).locate(sample.extra)
    except DatabaseUnavailable as exc:
        return Verification(passed=False, details={"stage": "database", "format": 0.0}, error=str(exc))
    if db is None:
        return Verification(
            passed=False,
            details={"stage": "database", "format": 0.0},
            error="the sample names no database: set extra.db in its row or nl2sql.db in the config",
        )
    verifier = ctx.stash.start(
        VERIFIER, lambda: Verifier(settings.verify_options(), settings.verify_workers or None, settings.verify_pool)
    )
    return await verifier.verify_async(db, sample.ground_truth, sample.response)


@hookimpl
def compute_score(verification: Verification | None, ctx: ScoreContext) -> Score | None:
    """Execution match, blended with the format component by ``format_weight``."""
    if verification is None:
        return None
    weight = ctx.settings_as(Settings).format_weight
    execution = float(verification.passed)
    fmt = float(verification.details.get("format", 0.0))
    error = verification.error if verification.details.get("stage") in INFRASTRUCTURE_STAGES else None
    return Score(
        value=(1 - weight) * execution + weight * fmt, components={"execution": execution, "format": fmt}, error=error
    )


@hookimpl
def register_examples() -> list[Example]:
    """Two rollouts on the shipped shop database: one explores and answers right, one answers wrong."""
    from rlf_nl2sql.shop import shop_db

    db = str(shop_db())
    question = "Which customers live in London?"
    gold = "SELECT name FROM customers WHERE city = 'London'"
    explore = '<tool_call>{"name": "sql", "arguments": {"query": "SELECT DISTINCT city FROM customers"}}</tool_call>'
    row: dict[str, Any] = {"prompt": question, "ground_truth": gold, "extra": {"db": db}}
    return [
        Example(row={**row, "id": "shop-london"}, script=[explore, f"```sql\n{gold}\n```"], expected_reward=1.0),
        Example(
            row={**row, "id": "shop-london-wrong"},
            script=[explore, "```sql\nSELECT name FROM customers WHERE city = 'Boston'\n```"],
            expected_reward=0.0,
        ),
    ]


@hookimpl
def shutdown(ctx: SetupContext) -> None:
    """Stop the run's verifier: its worker pool, and its cache of gold results."""
    verifier = ctx.stash.pop(VERIFIER, None)
    if verifier is not None:
        verifier.close()
