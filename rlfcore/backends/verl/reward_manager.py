"""The ``rlf`` reward manager: verl's naive reward manager with each sample's own ``extra_info``.

verl 0.9.1's reward managers merge a sample's ``tool_extra_fields`` into its ``extra_info`` dict in
place (``experimental/reward_loop/reward_manager/naive.py:44-47``). The rollout batch repeats each
prompt ``rollout.n`` times by reference, so the samples of one prompt share one ``extra_info``
dict; they are scored concurrently, and one sample's trace overwrote its sibling's before the
sibling's ``compute_score`` read it: a sample could be scored, and trained, on another one's
trajectory. This manager gives each sample a copy before the naive manager runs.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from verl.experimental.reward_loop.reward_manager import register
from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager

from rlfcore.backends.verl import REWARD_MANAGER


@register(REWARD_MANAGER)
class RlfRewardManager(NaiveRewardManager):
    """Scores one sample with the rlf reward function, on its own copy of ``extra_info``."""

    async def run_single(self, data: Any) -> dict[str, Any]:
        infos = data.non_tensor_batch.get("extra_info")
        if infos is not None:
            copies = np.empty(len(infos), dtype=object)
            copies[:] = [dict(info or {}) for info in infos]
            data.non_tensor_batch["extra_info"] = copies
        return await super().run_single(data)
