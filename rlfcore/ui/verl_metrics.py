"""verl's metric lines in rlf's names, so a verl run's curves sit in the same charts as a local run's.

Under ``rlf train --backend verl``, verl's own ``file`` logger writes ``RUN/verl_metrics.jsonl``, one
``{"step": N, "data": {...}}`` line per step in verl's names (``critic/score/mean``, ``timing_s/gen``,
...); a ``--resume`` sets the steps it keeps aside in ``verl_metrics.earlier.jsonl`` first, because the
logger starts its file anew. The UI reads both in place, byte offsets and all, and renames each line
here: the keys rlf charts get rlf's names, every other key keeps its verl name.
"""

from __future__ import annotations

from typing import Any

from rlfcore.backends.verl import EARLIER_METRICS_FILE, METRICS_FILE

FILE = METRICS_FILE
"""The file verl's file logger writes in the run folder."""
EARLIER = EARLIER_METRICS_FILE
"""The steps a ``--resume`` kept, set aside before verl's file logger starts its file anew."""

NAMES: dict[str, tuple[str, ...]] = {
    "reward_mean": ("critic/score/mean",),
    "response_length": ("response_length/mean",),
    "tool_calls_per_trajectory": ("tool_call_counts/mean",),
    "loss": ("actor/pg_loss", "actor/loss"),
    "grad_norm": ("actor/grad_norm",),
    "kl": ("actor/kl_loss", "actor/ppo_kl"),
    "clip_frac": ("actor/pg_clipfrac",),
    "rollout_s": ("timing_s/gen",),
    "score_s": ("timing_s/reward",),
    "train_s": ("timing_s/update_actor",),
    "step_s": ("timing_s/step",),
}
"""rlf's name, and the verl keys that fill it, the first present winning (the others keep their verl
names): ``kl`` is the KL to the reference (``actor/kl_loss``, logged when ``trainer.kl_coef > 0``), else
the old-vs-new policy KL (``actor/ppo_kl``); ``loss`` is the policy loss, else the total."""


def from_verl(line: dict[str, Any]) -> dict[str, Any]:
    """One FileLogger line as an rlf metrics row: ``step`` plus ``data``'s keys, renamed where rlf has a name."""
    data = line.get("data")
    data = dict(data) if isinstance(data, dict) else {}
    row: dict[str, Any] = {"step": line.get("step")}
    for name, sources in NAMES.items():
        key = next((k for k in sources if k in data), None)
        if key is not None:
            row[name] = data.pop(key)
    row.update((k, v) for k, v in data.items() if k not in row)
    return row
