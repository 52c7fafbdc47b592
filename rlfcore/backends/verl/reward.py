"""verl's custom reward function, answered by the rlf reward pipeline.

verl calls ``compute_score`` once per sample with the sample's ``extra_info``, into which its reward
managers merge the agent loop's ``extra_fields``; the rlf trace arrives there as ``extra_info["rlf"]``
and is scored by ``verify_tool`` → ``compute_score`` → ``judge`` with the run's plugins, exactly as
the local trainer scores it. verl scores samples one at a time, so ``judge`` sees groups of one; a
judge model verl serves is reached through its reward router.
"""

from __future__ import annotations

from typing import Any

REWARD_KEYS = ("score", "rlf_error")
"""The keys of every result: verl stacks them across samples, so each sample reports all of them."""


async def compute_score(
    data_source: Any = None,
    solution_str: str | None = None,
    ground_truth: Any = None,
    extra_info: dict[str, Any] | None = None,
    rlf_config: str | None = None,
    rlf_overrides: list[str] | None = None,
    reward_router_address: str | None = None,
    **_: Any,
) -> dict[str, float]:
    """The rlf reward of one verl sample: ``score`` (the reward) and ``rlf_error`` (1 when scoring failed).

    When verl serves a judge model (``reward.reward_model.enable=true``) it passes the address of its
    reward router; judge plugins then find it in ``ScoreContext.judge_endpoints``.
    """
    from rlfcore.backends.verl.bridge import trajectory_of
    from rlfcore.backends.verl.shared import shared_runtime
    from rlfcore.rewards import RewardPipeline

    trace = (extra_info or {}).get("rlf")
    if not isinstance(trace, dict):
        raise ValueError(
            f"sample of {data_source!r} has no rlf trace in extra_info['rlf']: it was not produced by the "
            "rlf_agent agent loop (set agent_name=rlf_agent, or convert the data with `rlf train --backend verl`)"
        )
    if not rlf_config:
        raise ValueError("the rlf reward function needs reward.custom_reward_function.reward_kwargs.rlf_config")
    runtime = await shared_runtime(rlf_config, [str(o) for o in (rlf_overrides or [])])
    if reward_router_address:
        runtime.judge_endpoints = [router_url(reward_router_address)]
    traj = trajectory_of(trace)
    await RewardPipeline(runtime).score_group([traj])
    return {"score": float(traj.reward), "rlf_error": float(traj.reward_error is not None)}


def router_url(address: str) -> str:
    """The OpenAI-compatible base URL of verl's reward router at ``HOST:PORT`` (it forwards every path
    to the judge's vLLM or SGLang servers)."""
    return address if address.startswith(("http://", "https://")) else f"http://{address}/v1"
