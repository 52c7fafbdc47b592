"""A step's trajectories by GRPO group, one sample (or two side by side), its tokens, its raw line;
an agent episode's sample and tokens by segment.

Each page reads only its own lines of the sample file, through the file's byte-offset index
(:mod:`rlfcore.ui.samples`), and shows records made safe to render (:mod:`rlfcore.ui.records`).
"""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response, StreamingResponse

from rlfcore.ui import runs as rd
from rlfcore.ui.context import ui_of
from rlfcore.ui.params import index_param, int_param, number
from rlfcore.ui.records import LINE_BYTES, shown, too_big
from rlfcore.ui.samples import Entry, SampleIndex, sample_files, step_of
from rlfcore.ui.tokens import load as load_tokenizer
from rlfcore.ui.tokens import segments, tokenizer_dir, tokens

GROUPS_PER_PAGE = 10


async def trajectories(request: Request) -> HTMLResponse:
    ui = ui_of(request)
    run, path, index = await ui.sample_index(request)
    q = request.query_params
    try:
        keep = index.filter(
            min_reward=number(q.get("min_reward")),
            max_reward=number(q.get("max_reward")),
            stop_reason=q.get("stop") or None,
            tool_error=q.get("tool_error") == "1",
            env=q.get("env") or None,
            mismatch=q.get("mismatch") == "1",
            search=q.get("q") or None,
        )
    except ValueError as exc:
        raise HTTPException(400, str(exc)) from None
    kept = set(keep)
    groups = [(row, [i for i in members if i in kept]) for row, members in index.groups.items()]
    groups = [(row, members) for row, members in groups if members]
    page_no = int_param(request, "page", 0)
    pages = max(1, -(-len(groups) // GROUPS_PER_PAGE))
    on_page = groups[page_no * GROUPS_PER_PAGE : (page_no + 1) * GROUPS_PER_PAGE]
    entries = index.entries
    return ui.page(
        request,
        "trajectories.html",
        run=rd.run_info(ui.root, run, ui.samples),
        file=path,
        files=sample_files(run),
        groups=[(row, [(i, entries[i]) for i in members], _spread(entries, members)) for row, members in on_page],
        page_no=page_no,
        pages=pages,
        matched=len(keep),
        total=len(entries),
        q=q,
        stop_reasons=index.stop_reasons(),
        envs=index.envs(),
        step_of=step_of,
    )


async def sample(request: Request) -> HTMLResponse:
    ui = ui_of(request)
    run, path, index = await ui.sample_index(request)
    picked = [index_param(request, k, len(index.entries)) for k in ("i", "j") if k in request.query_params]
    if not picked:
        raise HTTPException(400, "give the sample's index as ?i=N (and ?j=M to compare two)")
    records = [(i, await run_in_threadpool(_record, index, i)) for i in picked]
    siblings = index.groups.get(index.entries[picked[0]].row_id, [])
    return ui.page(
        request,
        "sample.html",
        run=rd.run_info(ui.root, run, ui.samples),
        file=path,
        records=records,
        siblings=siblings,
        turns=_turns,
        segments=segments,
    )


async def token_view(request: Request) -> HTMLResponse:
    ui = ui_of(request)
    run, path, index = await ui.sample_index(request)
    i = index_param(request, "i", len(index.entries))
    record = await run_in_threadpool(_record, index, i)
    where = tokenizer_dir(run, rd.read_config(run))
    tok = await run_in_threadpool(load_tokenizer, str(where)) if where else None
    toks, at = tokens(record, tok)
    return ui.page(
        request,
        "tokens.html",
        run=rd.run_info(ui.root, run, ui.samples),
        file=path,
        i=i,
        record=record,
        tokens=toks,
        segments=segments(record, tok, toks),
        mismatch_at=at,
        tokenizer=where,
    )


async def raw_line(request: Request) -> Response:
    """One stored line as it is, for records the pages show cut."""
    ui = ui_of(request)
    *_, index = await ui.sample_index(request)
    i = index_param(request, "i", len(index.entries))
    return StreamingResponse(index.raw(i), media_type="application/json")


def _record(index: SampleIndex, i: int) -> dict[str, Any]:
    """Entry ``i`` as the pages show it (see :mod:`rlfcore.ui.records`)."""
    entry = index.entries[i]
    if entry.length > LINE_BYTES:
        return too_big(entry.id, entry.length)
    try:
        return shown(index.read(i))
    except ValueError as exc:
        return shown({"id": entry.id, "error": f"the line is not JSON any more ({exc}): was the file rewritten?"})


def _turns(record: dict[str, Any]) -> list[dict[str, Any]]:
    """Messages as turns: each assistant message with the tool results that answer its calls."""
    out: list[dict[str, Any]] = []
    for m in record.get("messages") or []:
        if not isinstance(m, dict):
            continue
        if m.get("role") == "tool" and out and out[-1]["message"].get("role") == "assistant":
            out[-1]["results"].append(m)
        else:
            out.append({"message": m, "results": []})
    return out


def _spread(entries: list[Entry], members: list[int]) -> float | None:
    """A group's reward range (max minus min), None with fewer than two rewards."""
    rewards = [r for r in (entries[i].reward for i in members) if r is not None]
    return max(rewards) - min(rewards) if len(rewards) > 1 else None
