"""pluggy's private names that ``rlfcore.hookcall`` leans on, checked so a pluggy release that drops
them fails here, by name, rather than making every hook call quietly take the slow path."""

from __future__ import annotations

import importlib

import pluggy

from rlfcore import hookcall
from rlfcore.plugins import PluginManager


def test_pluggy_still_has_the_private_multicall():
    callers = importlib.import_module("pluggy._callers")
    assert hasattr(callers, "_multicall"), (
        f"pluggy {pluggy.__version__} has no pluggy._callers._multicall, which rlfcore.hookcall calls "
        "hooks around; update hookcall._pluggy_call and the pluggy bound in pyproject.toml"
    )


def test_a_manager_runs_hooks_through_multicall_so_the_fast_path_is_taken():
    pm = PluginManager().pm
    assert hasattr(pm, "_inner_hookexec"), (
        f"pluggy {pluggy.__version__}'s PluginManager has no _inner_hookexec, which rlfcore.hookcall compares "
        "with _multicall to call an implementation directly; update hookcall.call_impl_sync"
    )
    assert hookcall._PLUGGY_CALL is not None and pm._inner_hookexec is hookcall._PLUGGY_CALL
