"""The runtime's lifecycle: registration sees whether it is only listed, and shutdown runs once per run."""

from __future__ import annotations

import asyncio

from rlfcore import hookimpl
from rlfcore.catalog import describe
from rlfcore.testing import make_manager, make_runtime, rollout


class Recorder:
    def __init__(self, fail_shutdown: bool = False):
        self.listing: list[bool] = []
        self.shutdowns = 0
        self.fail_shutdown = fail_shutdown

    @hookimpl
    def register_tools(self, ctx):
        self.listing.append(ctx.listing)
        return []

    @hookimpl
    async def shutdown(self, ctx):
        self.shutdowns += 1
        if self.fail_shutdown:
            raise RuntimeError("cleanup failed")


def test_listing_is_flagged_so_plugins_can_skip_starting_servers():
    plugin = Recorder()
    describe(make_manager({"rec": plugin}))
    make_runtime({"plugins": ["rec"]}, {"rec": plugin})
    assert plugin.listing == [True, False]


def test_shutdown_runs_once_per_run_even_when_another_plugin_fails_to_clean_up(caplog):
    ok, broken = Recorder(), Recorder(fail_shutdown=True)
    rollout(
        {"plugins": ["ok", "broken"], "envs": {"main": ["ok"]}},
        [{"id": "q", "prompt": "x"}],
        {"q": ["done"]},
        {"ok": ok, "broken": broken},
    )
    assert ok.shutdowns == 1 and broken.shutdowns == 1
    assert "plugin 'broken' failed to shut down" in caplog.text
    runtime = make_runtime({"plugins": ["ok"]}, {"ok": (again := Recorder())})
    asyncio.run(runtime.aclose())
    asyncio.run(runtime.aclose())
    assert again.shutdowns == 1
