"""CPU-heavy scorers in the run's worker processes: ``ScoreContext.in_process``."""

from __future__ import annotations

import os

from rlfcore import hookimpl
from rlfcore.testing import rollout
from tests.support.samples import die_in_worker, square_in_worker

ROWS = [{"id": f"q{i}", "prompt": f"square {i}", "ground_truth": str(i * i)} for i in range(4)]


class SquareScorer:
    """Scores in a worker process; row q2's worker dies."""

    def __init__(self) -> None:
        self.pids: set[int] = set()

    @hookimpl
    async def compute_score(self, sample, verification, ctx):
        if sample.id.startswith("q2#"):
            await ctx.in_process(die_in_worker)
        n = int(sample.id[1:].split("#")[0])
        value, pid = await ctx.in_process(square_in_worker, n)
        self.pids.add(pid)
        return float(str(value) == sample.response)


def test_scores_come_from_worker_processes_and_a_dead_worker_costs_one_sample():
    scorer = SquareScorer()
    config = {"plugins": ["square"], "rollout": {"n": 2}, "reward": {"processes": 2}}
    script = {r["id"]: [r["ground_truth"]] for r in ROWS}
    trajs = rollout(config, ROWS, script, plugins={"square": scorer})
    by_row: dict[str, list] = {}
    for t in trajs:
        by_row.setdefault(t.row_id, []).append(t)
    assert scorer.pids and os.getpid() not in scorer.pids
    for row in ("q0", "q1", "q3"):  # scored in workers, also after the pool was replaced
        assert [t.reward for t in by_row[row]] == [1.0, 1.0]
        assert all(t.reward_error is None for t in by_row[row])
    for t in by_row["q2"]:
        assert t.reward == 0.0 and "worker process running die_in_worker died" in t.reward_error


def test_without_a_runtime_the_call_runs_here():
    import asyncio

    from rlfcore.context import ScoreContext

    value, pid = asyncio.run(ScoreContext(env=None).in_process(square_in_worker, 7))
    assert (value, pid) == (49, os.getpid())
