"""verl's ``verl.plugins`` entry point is what registers ``rlf_agent``: each case imports verl in a fresh
process, as every Ray worker does, with a dist-info that declares the entry point as rlfcore's does."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support import ROOT

pytest.importorskip("verl", reason="verl is not installed (pip install 'rlfcore[verl]')")

pytestmark = pytest.mark.slow  # each case imports verl (torch, ray) in a new process: about 7 s


def _fake_dist(site: Path) -> Path:
    """A dist-info declaring rlfcore's ``verl.plugins`` entry point, as the installed package does."""
    info = site / "rlfcore_verl_probe-0.0.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: rlfcore-verl-probe\nVersion: 0.0.0\n")
    (info / "entry_points.txt").write_text("[verl.plugins]\nrlf = rlfcore.backends.verl.plugin\n")
    return site


PROBE = textwrap.dedent(
    """
    import verl
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
    print("rlf_agent" in _agent_loop_registry)
    """
)


@pytest.mark.parametrize("policy, registered", [("auto", True), ("none", False)])
def test_entry_point_registers_the_agent_loop(tmp_path, policy, registered):
    site = _fake_dist(tmp_path / "site")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]), "VERL_USE_EXTERNAL_PLUGINS": policy}
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == str(registered)


def test_entry_point_failure_is_logged_loudly(tmp_path):
    site = _fake_dist(tmp_path / "site")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    # the bridge fails to import, the way a missing dependency would make it
    code = "import sys; sys.modules['rlfcore.backends.verl.bridge'] = None\n" + PROBE
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "False"
    assert "rlf_agent agent loop is NOT registered" in out.stderr
