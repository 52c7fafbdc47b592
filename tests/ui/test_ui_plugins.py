"""``rlf ui`` finds a plugin installed while it runs (issue 33): no restart. The distribution is written
as ``pip install -e`` writes one, into a folder on ``sys.path``: a dist-info with the entry point, and a
``.pth`` naming the source folder, which the interpreter reads only at start-up."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from rlfcore.plugins import ENV_DISABLE_AUTOLOAD, ENV_PLUGINS, PluginManager
from rlfcore.ui import configs

PLUGIN = """
from pydantic import BaseModel

from rlfcore import hookimpl


class Settings(BaseModel):
    depth: int = 1


@hookimpl
def register_config_schema():
    return Settings
"""

CONFIG = "plugins: [late]\nlate: {depth: 3}\n"


@pytest.fixture()
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A folder on ``sys.path`` to install into; the import system as it was afterwards."""
    folder = tmp_path / "site"
    folder.mkdir()
    monkeypatch.delenv(ENV_DISABLE_AUTOLOAD, raising=False)
    monkeypatch.delenv(ENV_PLUGINS, raising=False)
    monkeypatch.setattr(sys, "path", [str(folder), *sys.path])
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    yield folder
    sys.modules.pop("rlf_late", None)


def _install_editable(site: Path, source: Path) -> None:
    """The files of ``pip install -e`` of a distribution ``rlf-late`` whose package is in ``source``."""
    (source / "rlf_late").mkdir(parents=True)
    (source / "rlf_late" / "__init__.py").write_text(PLUGIN)
    info = site / "rlf_late-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: rlf-late\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[rlf]\nlate = rlf_late\n")
    (site / "__editable__.rlf_late-0.1.pth").write_text(f"{source}\n")
    (info / "RECORD").write_text(
        "__editable__.rlf_late-0.1.pth,,\nrlf_late-0.1.dist-info/METADATA,,\n"
        "rlf_late-0.1.dist-info/entry_points.txt,,\nrlf_late-0.1.dist-info/RECORD,,\n"
    )


def test_a_plugin_installed_while_the_ui_runs_validates_without_a_restart(site: Path, tmp_path: Path) -> None:
    source = tmp_path / "project" / "run.yaml"
    before, _ = configs.validate(CONFIG, [], source)
    assert [i["path"] for i in before] == ["plugins[0]", "late"], before  # not installed yet

    _install_editable(site, tmp_path / "src")
    issues, resolved = configs.validate(CONFIG, [], source)
    assert issues == [] and resolved is not None and "depth: 3" in resolved


def test_a_new_plugin_manager_loads_a_distribution_installed_after_the_process_started(
    site: Path, tmp_path: Path
) -> None:
    PluginManager().discover(builtins=False)  # the folders are read (and cached) before the install
    _install_editable(site, tmp_path / "src")
    manager = PluginManager()
    manager.discover(builtins=False)
    assert manager.infos["late"].distribution == "rlf-late"
    manager.enable(["late"])
    assert manager.infos["late"].loaded and "register_config_schema" in manager.infos["late"].hooks
