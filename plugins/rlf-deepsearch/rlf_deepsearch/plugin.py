"""rlf plugin ``deepsearch``: search a passage corpus over many turns, rewarded by QA exact match / F1.

Enable it with ``plugins: [deepsearch]``; settings live under ``deepsearch:`` (see
:class:`~rlf_deepsearch.settings.Settings`). With ``format: hermes`` the model calls a ``search``
tool in the Hermes format and the core's defaults parse and observe. With ``format: search-r1`` this
plugin reads Search-R1's ``<search>`` tags as calls of the same tool, which the core's executor runs,
and appends the ``<information>`` block as raw text inside the assistant's turn, as Search-R1 does,
so Search-R1 data, prompts and checkpoints run unchanged; the tool is then unlisted
(``Tool.listed``): callable, but not in the prompt, as Search-R1 prompts describe the tags themselves.

Nothing heavy is imported here: bm25s, numpy and httpx load when a search backend is first built.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel

from rlf_deepsearch.formats import STOP, information_observation, parse_search_r1
from rlf_deepsearch.settings import Settings, base_dir, settings_of
from rlfcore import (
    Example,
    Message,
    Sample,
    Score,
    ScoreContext,
    SetupContext,
    Stash,
    StashKey,
    Tool,
    ToolCall,
    ToolResult,
    TurnContext,
    hookimpl,
    tool,
)

if TYPE_CHECKING:
    import click

    from rlf_deepsearch.search import RunSearcher


@hookimpl
def register_config_schema() -> type[BaseModel]:
    return Settings


@hookimpl
def register_commands() -> dict[str, click.Command]:
    """``rlf deepsearch ...``: serve or build an index, prepare QA datasets (the ``rlf-deepsearch`` script's group)."""
    from rlf_deepsearch.cli import cli

    return {"deepsearch": cli}


SEARCHER: StashKey[RunSearcher] = StashKey("deepsearch searcher")  # typed so: the search module loads numpy
"""The run's index (or retrieval client) and its batching threads: opened by ``register_tools``, closed by ``shutdown``."""


def search_tool(settings: Settings, base: Path, stash: Stash) -> Tool:
    """The ``search`` tool for these settings, searching with the searcher in ``stash`` (opened on first use)."""
    from rlf_deepsearch.formats import search_r1_passages
    from rlf_deepsearch.search import format_passages, open_searcher

    search_r1 = settings.format == "search-r1"
    layout = search_r1_passages if search_r1 else format_passages

    @tool(name="search")
    def search(query: str) -> str:
        """Search the corpus and return the most relevant passages.

        Args:
            query: What to look for: keywords, a name, or a question.
        """
        searcher = stash.start(SEARCHER, lambda: open_searcher(settings, base))
        return layout(searcher.search(query, settings.topk), settings.max_chars)

    search.listed = not search_r1  # Search-R1 prompts describe the tags; listed, the Hermes instructions would show
    return search


@hookimpl
def register_tools(ctx: SetupContext) -> list[Tool]:
    settings = settings_of(ctx)
    if ctx.config is not None and settings.format == "search-r1":
        missing = [s for s in STOP if s not in ctx.config.rollout.sampling.stop]
        if missing:
            raise ValueError(
                f"deepsearch.format 'search-r1' needs rollout.sampling.stop to hold {list(STOP)} (Search-R1's turns "
                f"end there, then the <information> block follows); missing {missing}"
            )
    if (
        ctx.config is not None and not ctx.listing
    ):  # a run: build or load the index now, not in the first call's timeout
        from rlf_deepsearch.search import open_searcher

        ctx.stash.start(SEARCHER, lambda: open_searcher(settings, base_dir(ctx)))
    return [search_tool(settings, base_dir(ctx), ctx.stash)]


@hookimpl
def shutdown(ctx: SetupContext) -> None:
    """Stop the run's searcher: its batching threads, and its place on the node's retrieval server
    (the last client stops that server)."""
    searcher = ctx.stash.pop(SEARCHER, None)
    if searcher is not None:
        searcher.close()


@hookimpl
def parse_tool_calls(text: str, ctx: TurnContext) -> list[ToolCall] | None:
    if settings_of(ctx).format != "search-r1":
        return None
    return parse_search_r1(text)


@hookimpl
def build_observation(results: list[ToolResult], ctx: TurnContext) -> list[Message] | None:
    if settings_of(ctx).format != "search-r1":
        return None
    return information_observation(results)


@hookimpl
def compute_score(sample: Sample, ctx: ScoreContext) -> Score | None:
    from rlf_deepsearch.rewards import score_sample

    return score_sample(sample, settings_of(ctx))


@hookimpl
def register_examples(ctx: SetupContext) -> list[Example]:
    """Two questions on the demo corpus (only when no corpus is configured): a right answer scores 1,
    a wrong one only the format weight."""
    settings = settings_of(ctx)
    if settings.corpus or settings.retriever_url:
        return []
    if settings.format == "search-r1":
        call = "<think>I should look this up.</think>\n<search>red planet</search>"
        right, wrong = (
            "<think>Doc 1 says Mars.</think>\n<answer>Mars</answer>",
            "<think>Venus.</think><answer>Venus</answer>",
        )
    else:
        call = '<tool_call>\n{"name": "search", "arguments": {"query": "red planet"}}\n</tool_call>'
        right, wrong = "<answer>Mars</answer>", "<answer>Venus</answer>"
    row = {
        "prompt": "Which planet is known as the Red Planet? Answer inside <answer></answer>.",
        "ground_truth": ["Mars"],
    }
    return [
        Example(row={"id": "red-planet", **row}, script=[call, right], expected_reward=1.0),
        Example(row={"id": "red-planet-wrong", **row}, script=[call, wrong], expected_reward=settings.format_reward),
    ]
