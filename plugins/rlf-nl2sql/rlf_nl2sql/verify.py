"""Verification by execution: run the final SQL and the gold SQL, compare the results.

A :class:`Verifier` checks samples on a pool of worker processes (or threads), so verification runs
in parallel and never blocks the event loop that drives generation. sqlite3 releases the GIL only
while SQLite steps through a statement; on short queries like GeoQuery's most of a check is Python
(reading the answer, the authorizer's callbacks, building and comparing rows), so threads contend
for the GIL and do not beat one thread, while processes do when cores are free
(``benchmarks/verify_throughput.py`` measures both against a plain serial loop). Processes are
started with ``spawn``, never ``fork``: a trainer's process holds threads and GPU state that a fork
would copy half-made.

Samples verified in the same event-loop turn (a group's, gathered) go to the pool in a few chunks
rather than one task each. Each worker keeps one read-only :class:`~rlf_nl2sql.database.Session`
per database, and a gold query's result is computed once per worker and shared by every sample of
its group, also while in flight. Every query has a time limit (the sessions' progress handler), so
no worker can hang.
"""

from __future__ import annotations

import asyncio
import functools
import math
import multiprocessing
import os
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from rlf_nl2sql.answer import AnswerFormat, extract_sql
from rlf_nl2sql.compare import Tolerance, results_match
from rlf_nl2sql.database import MAX_RESULT_BYTES, DatabaseUnavailable, QueryError, QueryResult, Session
from rlf_nl2sql.sqltext import has_top_level_order_by
from rlfcore import Verification

PoolKind = Literal["process", "thread"]
Item = tuple[Any, Any, str]
"""``(database path, gold SQL or list of them, final answer)``."""

DEFAULT_MAX_WORKERS = 8
"""Workers when none are asked for: one per CPU, at most this many (a trainer's machine has other work)."""
GOLD_CACHE_SIZE = 4096
CHUNKS_PER_WORKER = 4
"""A batch of samples is split into this many chunks per worker, so one slow query delays few others."""


@dataclass(frozen=True)
class VerifyOptions:
    timeout_s: float = 10.0
    max_rows: int = 100_000
    max_bytes: int = MAX_RESULT_BYTES
    tolerance: Tolerance = field(default_factory=Tolerance)
    ignore_column_order: bool = True
    answer_format: AnswerFormat = "sql_fence"


@dataclass
class _Gold:
    result: QueryResult | None = None
    error: str | None = None
    ordered: bool = False
    """The gold query orders its result, so the comparison is in order."""


class Verifier:
    """Verifies final answers against gold SQL, in parallel, with per-query time limits."""

    def __init__(
        self, options: VerifyOptions = VerifyOptions(), workers: int | None = None, pool: PoolKind = "process"
    ):
        self.options = options
        self.workers = workers or min(DEFAULT_MAX_WORKERS, os.cpu_count() or 1)
        self.pool = pool
        self._executor: Executor | None = None
        self._generation = 0
        self._local = threading.local()
        self._gold: OrderedDict[tuple[str, str], Future[_Gold]] = OrderedDict()
        self._lock = threading.Lock()
        self._pending: list[tuple[Item, asyncio.Future[Verification]]] = []

    # --- entry points --------------------------------------------------------------------------------

    def verify(self, db: str | Path, gold_sql: str | Sequence[str], response: str) -> Verification:
        """Verify one final message against the gold SQL (several: any may match), in this thread.

        ``details`` holds the SQL found, its ``shape`` and ``format`` (1.0 when in the expected
        shape), row counts, and the ``stage`` reached: ``extract``, ``prediction`` (the SQL failed),
        ``database``, ``gold`` (the data's fault) or ``compare``.
        """
        extraction = extract_sql(response)
        details: dict[str, Any] = {
            "sql": extraction.sql,
            "shape": extraction.shape,
            "format": float(extraction.follows(self.options.answer_format)),
        }

        def failed(stage: str, error: str) -> Verification:
            return Verification(passed=False, score=0.0, details={**details, "stage": stage}, error=error)

        if not extraction.sql:
            return failed("extract", "no SQL found in the final answer")
        golds = [gold_sql] if isinstance(gold_sql, str) else list(gold_sql)
        if not golds:
            return failed("gold", "the sample has no gold SQL")
        try:
            pred = self._session(db).query(
                extraction.sql,
                timeout_s=self.options.timeout_s,
                max_rows=self.options.max_rows,
                max_bytes=self.options.max_bytes,
            )
        except QueryError as exc:
            return failed("database" if isinstance(exc, DatabaseUnavailable) else "prediction", str(exc))
        if pred.truncated:
            return failed("prediction", f"the query returned more than {self.options.max_rows} rows")
        for gold in golds:
            expected = self._gold_result(db, gold)
            if expected.error is not None or expected.result is None:
                return failed("gold", f"gold SQL failed: {expected.error}")
            counts = {"pred_rows": len(pred.rows), "gold_rows": len(expected.result.rows), "ordered": expected.ordered}
            if results_match(
                expected.result.rows,
                pred.rows,
                ordered=expected.ordered,
                tolerance=self.options.tolerance,
                ignore_column_order=self.options.ignore_column_order,
            ):
                return Verification(passed=True, score=1.0, details={**details, "stage": "compare", **counts})
        return Verification(passed=False, score=0.0, details={**details, "stage": "compare", **counts})

    async def verify_async(self, db: str | Path, gold_sql: str | Sequence[str], response: str) -> Verification:
        """:meth:`verify` on the pool, awaited: samples awaited together verify in parallel."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Verification] = loop.create_future()
        self._pending.append(((db, gold_sql, response), future))
        if len(self._pending) == 1:
            loop.call_soon(self._flush, loop)
        return await future

    def verify_many(self, items: Iterable[Item]) -> list[Verification]:
        """Verify ``(db, gold_sql, response)`` items on the pool; results in input order."""
        items = list(items)
        chunks = [self._submit(items[i : i + n]) for i, n in self._chunks(len(items))]
        out = []
        for chunk in chunks:
            for result in chunk.result():
                if isinstance(result, BaseException):
                    raise result
                out.append(result)
        return out

    def clear(self) -> None:
        """Forget cached gold results, here and in the worker processes (say, after a database changed)."""
        with self._lock:
            self._gold.clear()
            self._generation += 1

    def close(self) -> None:
        """Stop the pool, waiting for running checks, and forget cached gold results."""
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)
        self.clear()

    @property
    def executor(self) -> Executor:
        """The pool, started on first use."""
        with self._lock:
            if self._executor is None:
                if self.pool == "process":
                    self._executor = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"))
                else:
                    self._executor = ThreadPoolExecutor(self.workers, thread_name_prefix="rlf-nl2sql-verify")
            return self._executor

    # --- internals -----------------------------------------------------------------------------------

    def _flush(self, loop: asyncio.AbstractEventLoop) -> None:
        batch, self._pending = self._pending, []
        for start, size in self._chunks(len(batch)):
            chunk = batch[start : start + size]
            try:
                done = self._submit([item for item, _ in chunk])
            except Exception as exc:  # a closed or broken pool: the waiting samples must still hear back
                done = Future()
                done.set_exception(exc)
            done.add_done_callback(functools.partial(_settle_on, loop, chunk))

    def _chunks(self, n: int) -> list[tuple[int, int]]:
        """``(start, size)`` of the chunks ``n`` items are split into."""
        size = max(1, math.ceil(n / (self.workers * CHUNKS_PER_WORKER)))
        return [(start, size) for start in range(0, n, size)]

    def _submit(self, items: list[Item]) -> Future[list[Verification | BaseException]]:
        if self.pool == "process":
            return self.executor.submit(_verify_in_worker, self.options, self._generation, items)
        return self.executor.submit(self._verify_chunk, items)

    def _verify_chunk(self, items: list[Item]) -> list[Verification | BaseException]:
        out: list[Verification | BaseException] = []
        for item in items:
            try:
                out.append(self.verify(*item))
            except Exception as exc:  # one sample's failure is that sample's, not its chunk's
                out.append(exc)
        return out

    def _session(self, db: str | Path) -> Session:
        sessions: dict[str, Session] = self._local.__dict__.setdefault("sessions", {})
        key = str(db)
        if key not in sessions:
            sessions[key] = Session(db)
        return sessions[key]

    def _gold_result(self, db: str | Path, sql: str) -> _Gold:
        """The gold query's result, computed once per (database, SQL) even when asked concurrently."""
        key = (str(db), sql)
        with self._lock:
            future = self._gold.get(key)
            owner = future is None
            if future is None:
                future = self._gold[key] = Future()
                if len(self._gold) > GOLD_CACHE_SIZE:
                    self._gold.popitem(last=False)
            else:
                self._gold.move_to_end(key)
        if owner:
            try:
                gold = self._run_gold(db, sql)
            except BaseException as exc:  # waiters must not hang on a future nobody will settle
                self._forget(key)
                future.set_exception(exc)
                raise
            if gold.error is not None:  # a timeout may pass on a later try: keep only successes
                self._forget(key)
            future.set_result(gold)
        return future.result()

    def _forget(self, key: tuple[str, str]) -> None:
        with self._lock:
            self._gold.pop(key, None)

    def _run_gold(self, db: str | Path, sql: str) -> _Gold:
        try:
            result = self._session(db).query(
                sql, timeout_s=self.options.timeout_s, max_rows=self.options.max_rows, max_bytes=self.options.max_bytes
            )
        except QueryError as exc:
            return _Gold(error=str(exc))
        if result.truncated:
            return _Gold(error=f"the gold query returned more than {self.options.max_rows} rows")
        return _Gold(result=result, ordered=has_top_level_order_by(sql))


def _settle_on(
    loop: asyncio.AbstractEventLoop,
    chunk: list[tuple[Item, asyncio.Future[Verification]]],
    done: Future[list[Verification | BaseException]],
) -> None:
    """A chunk's done-callback, on whichever thread finished it: settle the chunk on ``loop``'s thread."""
    loop.call_soon_threadsafe(_settle, chunk, done)


def _settle(
    chunk: list[tuple[Item, asyncio.Future[Verification]]], done: Future[list[Verification | BaseException]]
) -> None:
    """Hand a chunk's results to the waiting coroutines (on the event loop's thread)."""
    error = done.exception()
    results = [error] * len(chunk) if error is not None else done.result()
    for (_, future), result in zip(chunk, results):
        if future.done():  # its caller was cancelled
            continue
        if isinstance(result, BaseException):
            future.set_exception(result)
        else:
            future.set_result(result)


_WORKER: tuple[VerifyOptions, int, Verifier] | None = None
"""In a pool process: the verifier doing its checks, with the options and generation it serves."""


def _verify_in_worker(options: VerifyOptions, generation: int, items: list[Item]) -> list[Verification | BaseException]:
    global _WORKER  # noqa: PLW0603 - one verifier per pool process, kept between its tasks
    if _WORKER is None or _WORKER[:2] != (options, generation):
        _WORKER = (options, generation, Verifier(options, workers=1, pool="thread"))
    return _WORKER[2]._verify_chunk(items)
