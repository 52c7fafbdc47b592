"""What rlf's test modules share (no tests here): test modules import from this package, never from
each other. A plain package, not a conftest, so subprocesses, worker processes and Ray workers can import
it by name too (with the repository root on their path)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The repository's root folder."""

AGENT_PROGRAMS = Path(__file__).with_name("agent_programs.py")
"""The agent programs' file (:mod:`tests.support.agent_programs`), as ``agent.entry`` names it
(``FILE:function``) and ``agent.command`` runs it."""
