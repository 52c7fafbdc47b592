"""The ``verifiers:`` section of a run config: which installed environment, with which arguments."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Settings(BaseModel):
    """``env`` is what ``vf-eval`` takes as its positional argument (the taskset's id, its installed
    package name); ``args`` are that taskset's config fields, as ``--env.taskset.*`` sets them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    env: str | None = Field(None, description="The installed verifiers environment (taskset id), e.g. 'my-taskset'.")
    args: dict[str, Any] = Field(
        default_factory=dict, description="The taskset's config fields (vf-eval's --env.taskset.KEY VALUE)."
    )
