"""OpenMP's defaults at rlf's start: a short spin before a thread sleeps, and a thread count within a CPU quota."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlfcore import cpus

ROOT = Path(__file__).resolve().parents[1]


def test_a_short_spin_unless_the_user_chose() -> None:
    assert cpus.openmp_defaults({}, cpus=2, visible=2) == {"GOMP_SPINCOUNT": cpus.SPIN_ROUNDS}
    assert cpus.openmp_defaults({"OMP_WAIT_POLICY": "ACTIVE"}, cpus=2, visible=2) == {}
    assert cpus.openmp_defaults({"GOMP_SPINCOUNT": "10000"}, cpus=2, visible=2) == {}


def test_threads_capped_by_the_quota_unless_the_user_chose() -> None:
    assert cpus.openmp_defaults({"OMP_WAIT_POLICY": "PASSIVE"}, cpus=2, visible=64) == {"OMP_NUM_THREADS": "2"}
    assert cpus.openmp_defaults({"OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": "8"}, cpus=2, visible=64) == {}


@pytest.mark.parametrize(
    ("files", "quota"),
    [
        ({"cpu.max": "150000 100000\n"}, 1.5),
        ({"cpu.max": "max 100000\n"}, None),
        ({"cpu/cpu.cfs_quota_us": "200000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 2.0),
        ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
        ({"cpu.max": "garbage\n"}, None),
        ({}, None),
    ],
)
def test_cpu_quota(tmp_path: Path, files: dict[str, str], quota: float | None) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert cpus.cpu_quota(tmp_path) == quota


def test_available_cpus_rounds_the_quota_up_within_the_cores(tmp_path: Path) -> None:
    (tmp_path / "cpu.max").write_text("50000 100000\n")
    assert cpus.available_cpus(tmp_path) == 1
    (tmp_path / "cpu.max").write_text(f"{(cpus.affinity_cpus() + 3) * 100000} 100000\n")
    assert cpus.available_cpus(tmp_path) == cpus.affinity_cpus()


def test_rlf_spins_briefly_by_default() -> None:
    """``rlf``'s entry point sets the wait policy before a command loads torch, whose OpenMP reads it."""
    code = (
        "import os, sys\n"
        "from rlfcore.cli import main\n"
        "try:\n"
        "    main(['--version'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(os.environ.get('GOMP_SPINCOUNT'), 'torch' in sys.modules)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.split()[-2:] == [cpus.SPIN_ROUNDS, "False"]
