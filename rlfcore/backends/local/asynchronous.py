"""Asynchronous GRPO: later steps roll out while a step updates, within a bound on staleness.

With ``trainer.max_staleness`` k, the rollout of step s starts once the policy has taken s - k
updates, so no token a step trains on was sampled more than k updates before it. The update runs in a
thread of its own while the run's loop keeps serving rollouts and tools; new weights reach the engine
between two of its decode steps (``weights_lock``), so one turn may span versions, and every token
keeps the version and the logprob it was sampled with. Rows decoding when the weights change are
prefilled again under the new ones (``refill_on_new_weights``): no row goes on from keys and values
the older weights computed, a mixture no policy's logprobs describe. The loss weighs each token by the importance
ratio between the policy the step starts from and the one that sampled it (:func:`.grpo.importance_weights`).

The gain is the time a synchronous trainer spends waiting: on tools, judges and the slowest
trajectory of a step. Compute is not shared out: the engine and the update take turns on the
weights, each holding the lock for one decode step or one micro-batch.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from rlfcore.loop import Rollout, Trajectory
from rlfcore.signals import deferred

from .rundir import rng_state

if TYPE_CHECKING:
    from .local import LocalTrainer

Collected = tuple[list[Trajectory], float, float, int]


def check(trainer: LocalTrainer) -> None:
    """A ValueError naming the setting when ``trainer`` cannot train asynchronously."""
    k, per_step, rows = trainer.cfg.max_staleness, trainer.cfg.prompts_per_step, len(trainer.rows)
    if not isinstance(trainer.rollout, Rollout):
        raise ValueError("trainer.max_staleness: asynchronous GRPO runs rlf's own token loop")
    if rows < (k + 1) * per_step:
        # Steps in flight together must hold distinct rows: a trajectory's id names its row and sample.
        raise ValueError(
            f"trainer.max_staleness ({k}): {k + 1} steps of {per_step} rows roll out at once, and the data has "
            f"{rows} rows; lower trainer.max_staleness or trainer.prompts_per_step, or add rows"
        )
    dropout = [name for name, m in trainer.model.named_modules() if isinstance(m, torch.nn.Dropout) and m.p > 0]
    dropout += [name for name in ("attention_dropout", "hidden_dropout") if getattr(trainer.model.config, name, 0)]
    if dropout:
        # The engine decodes between micro-batches of the update, in eval mode: with dropout the
        # update's passes would depend on when the engine last ran.
        raise ValueError(
            f"trainer.max_staleness: the model has dropout ({', '.join(dropout[:3])}); asynchronous GRPO "
            "needs a model without it (set it to 0 in the model's config.json)"
        )


def run(
    trainer: LocalTrainer, history: list[dict[str, Any]], on_step: Callable[[dict[str, Any]], None] | None
) -> list[dict[str, Any]]:
    """Train to ``trainer.steps`` asynchronously. Interrupted, the steps still rolling out are dropped
    and the last applied one is saved, as the synchronous trainer does."""
    saved, rng_after = trainer.step, rng_state()
    updates = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="rlf-update")

    async def train() -> None:
        nonlocal saved, rng_after
        k, steps = trainer.cfg.max_staleness, trainer.cfg.steps
        rolling: dict[int, asyncio.Task[Collected]] = {}
        launched = trainer.step
        loop = asyncio.get_running_loop()
        try:
            while trainer.step < steps:
                while launched < steps and launched <= trainer.step + k:  # no older than k updates
                    rolling[launched] = asyncio.create_task(_collect(trainer, launched))
                    launched += 1
                t0 = time.perf_counter()
                collected = await rolling.pop(trainer.step)
                waited = time.perf_counter() - t0
                with deferred():  # the update, the step count and the logs change together or not at all
                    metrics = await loop.run_in_executor(updates, trainer.apply_step, *collected, t0)
                    metrics["wait_s"] = waited
                    if trainer.end_of_step(metrics, history, on_step):
                        saved = trainer.step
                    rng_after = rng_state()
        finally:
            for task in rolling.values():
                task.cancel()
            await asyncio.gather(*rolling.values(), return_exceptions=True)

    try:
        trainer.runtime.run(train())
    except KeyboardInterrupt as exc:
        raise trainer.interrupted(exc, saved, rng_after, False) from exc
    finally:
        updates.shutdown(wait=True)
    return history


async def _collect(trainer: LocalTrainer, step: int) -> Collected:
    """Step ``step``'s samples, scored, with their own seeds (another step may be rolling out too)."""
    trajectories, rollout_s, score_s = await trainer.collect(trainer.step_rows(step), seed=trainer.step_seed(step))
    trainer.check_collected(trajectories, step)
    return trajectories, rollout_s, score_s, 0


def staleness(trainer: LocalTrainer, usable: list[Trajectory]) -> dict[str, float]:
    """How many updates old the generated tokens of a step are, as shares per age; raises if any is
    older than the bound (the scheduler's promise)."""
    ages = [trainer.step - v for t in usable for v, m in zip(t.policy_versions, t.response_mask) if m]
    if not ages:
        return {}
    if max(ages) > trainer.staleness or min(ages) < 0:
        raise RuntimeError(
            f"step {trainer.step + 1} holds tokens {max(ages)} updates old, beyond trainer.max_staleness "
            f"({trainer.staleness}): the asynchronous scheduler broke its bound"
        )
    out = {f"staleness/{age}": ages.count(age) / len(ages) for age in range(trainer.staleness + 1)}
    out.update(staleness_mean=sum(ages) / len(ages), staleness_max=float(max(ages)))
    return out


def behaviour_logprobs(traj: Trajectory) -> list[float]:
    """Each response token's logprob under the distribution that sampled it (after the cut)."""
    if len(traj.policy_versions) != len(traj.response_ids):
        raise RuntimeError(f"sample {traj.id}: the engine reported no policy versions for its tokens")
    return [lp - kept for lp, kept in zip(traj.logprobs, traj.kept_logmass)]
