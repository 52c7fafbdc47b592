"""The distributions as users get them: wheels of the core and the five plugins, installed in a fresh venv.

The fast tests read the repository (what is committed, what each ``pyproject.toml`` declares); the slow
one builds the six wheels from clean copies of their sources, installs each plugin with plain ``pip``
into a new venv (no system site-packages, nothing editable, dependencies from the package index) and
runs ``rlf plugins list`` and ``rlf plugins check`` there, outside the checkout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.support import ROOT

tomllib = pytest.importorskip("tomllib")

PLUGINS = {
    "nl2sql": "rlf-nl2sql",
    "mcp": "rlf-mcp",
    "deepsearch": "rlf-deepsearch",
    "judge-qwq": "rlf-judge-qwq",
    "code": "rlf-code",
    "verifiers": "rlf-verifiers",
    "openenv": "rlf-openenv",
}
"""Entry-point name -> distribution of every plugin shipped in ``plugins/``."""

PROJECTS = {"rlfcore": ROOT, **{dist: ROOT / "plugins" / dist for dist in PLUGINS.values()}}
"""Distribution -> the folder of its ``pyproject.toml``."""

HEAVY = {"torch", "transformers", "vllm", "verl", "sglang"}
"""What a plugin's default install must not pull in: ``rlf plugins check`` runs without a model."""


def pyproject(dist: str) -> dict:
    return tomllib.loads((PROJECTS[dist] / "pyproject.toml").read_text())


def package_dir(dist: str) -> Path:
    return PROJECTS[dist] / dist.replace("-", "_")


def data_files(package: Path) -> set[Path]:
    """The files of ``package`` that are not Python sources: they reach a wheel only as package data."""
    return {
        p
        for p in package.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".py", ".pyc")
    }


def git_files() -> list[str]:
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout")
    return subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.splitlines()


# --- the repository ---------------------------------------------------------------------------------


def test_no_build_output_is_committed():
    built = [
        f
        for f in git_files()
        if f.endswith((".whl", ".tar.gz"))
        or any(part.endswith(".egg-info") or part in ("build", "dist") for part in Path(f).parts)
    ]
    assert not built, f"build outputs are committed: {', '.join(built)}"


@pytest.mark.parametrize(
    "path", ["plugins/rlf-mcp/rlf_mcp.egg-info/PKG-INFO", "rlfcore.egg-info/PKG-INFO", "dist/x.whl", "build/lib/x.py"]
)
def test_build_output_is_ignored(path):
    git_files()
    assert subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=ROOT).returncode == 0, path


@pytest.mark.parametrize("dist", list(PROJECTS))
def test_package_data_patterns_name_files_that_exist(dist):
    declared = pyproject(dist).get("tool", {}).get("setuptools", {}).get("package-data", {})
    empty = [
        f"{pkg}: {pattern}"
        for pkg, patterns in declared.items()
        for pattern in patterns
        if not any((PROJECTS[dist] / pkg.replace(".", "/")).glob(pattern))
    ]
    assert not empty, f"{dist}/pyproject.toml declares package data that matches no file: {', '.join(empty)}"


@pytest.mark.parametrize("dist", list(PROJECTS))
def test_every_data_file_is_declared_package_data(dist):
    """A file the package reads at run time (a database, a corpus, a marker) must reach the wheel."""
    package = package_dir(dist)
    patterns = pyproject(dist).get("tool", {}).get("setuptools", {}).get("package-data", {}).get(package.name, [])
    declared = {p for pattern in patterns for p in package.glob(pattern)}
    missing = sorted(str(p.relative_to(PROJECTS[dist])) for p in data_files(package) - declared)
    assert not missing, f"{dist}: not declared as package data, so missing from the wheel: {', '.join(missing)}"


@pytest.mark.parametrize("dist", list(PLUGINS.values()))
def test_a_plugin_depends_on_the_core_and_nothing_heavy(dist):
    requirements = [Requirement(r) for r in pyproject(dist)["project"]["dependencies"]]
    names = {r.name.lower() for r in requirements}
    assert "rlfcore" in names, f"{dist} does not depend on rlfcore"
    heavy = [str(r) for r in requirements if r.name.lower() in HEAVY or (r.name == "rlfcore" and "train" in r.extras)]
    assert not heavy, f"{dist}'s default install pulls in {', '.join(heavy)}"


def test_the_public_api_exports_what_plugins_use():
    import rlfcore

    assert "tool" in rlfcore.__all__
    assert all(hasattr(rlfcore, name) for name in rlfcore.__all__)


# --- wheels in a fresh venv -----------------------------------------------------------------------


def _copy_source(dist: str, into: Path) -> Path:
    """A clean copy of a distribution's source: no egg-info or build folder of an earlier build leaks in."""
    junk = shutil.ignore_patterns(
        "__pycache__", "*.pyc", "*.egg-info", "build", "dist", "tests", "benchmarks", "examples"
    )
    dest = into / dist
    if dist == "rlfcore":
        dest.mkdir()
        for name in ("pyproject.toml", "README.md"):
            shutil.copy2(ROOT / name, dest / name)
        shutil.copytree(ROOT / "rlfcore", dest / "rlfcore", ignore=junk)
    else:
        shutil.copytree(PROJECTS[dist], dest, ignore=junk)
    return dest


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> Path:
    """The six wheels, built as ``pip wheel --no-deps`` builds them for an upload."""
    src = tmp_path_factory.mktemp("src")
    dist_dir = tmp_path_factory.mktemp("dist")
    sources = [str(_copy_source(dist, src)) for dist in PROJECTS]
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(dist_dir),
            *sources,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    return dist_dir


def _wheel(dist_dir: Path, dist: str) -> Path:
    [path] = dist_dir.glob(f"{dist.replace('-', '_')}-*.whl")
    return path


PROBE = """
import json, re, sys
from importlib import metadata

def editable(d):
    url = d.read_text("direct_url.json")
    return bool(url and json.loads(url).get("dir_info", {}).get("editable"))

dists = {re.sub(r"[-_.]+", "-", d.metadata["Name"]).lower(): editable(d) for d in metadata.distributions()}
files = [__import__(m).__file__ for m in sys.argv[1:]]
print(json.dumps({"prefix": sys.prefix, "dists": dists, "files": files}))
"""
"""Run by the venv's own Python: installed distributions (name -> editable?), and where modules import from."""


def _clean_env() -> dict[str, str]:
    """The environment of a user's shell: no path into the checkout, no rlf settings."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV") and not k.startswith("RLF_")}


@pytest.mark.slow
def test_wheels_carry_every_file_of_their_package(wheels):
    for dist in PROJECTS:
        package = package_dir(dist)
        with zipfile.ZipFile(_wheel(wheels, dist)) as whl:
            names = set(whl.namelist())
        needed = {
            str(p.relative_to(package.parent))
            for p in package.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
        }
        assert needed <= names, f"{dist}'s wheel lacks {', '.join(sorted(needed - names))}"


@pytest.mark.slow
def test_each_plugin_installs_from_wheels_into_a_fresh_venv(wheels, tmp_path):
    """``pip install --find-links DIST rlf-nl2sql`` brings the core; the others join; every check passes."""
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)  # a plain venv; the test's own pip installs into it
    python = env_dir / "bin" / "python"
    env = _clean_env()

    def pip(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pip", "--python", str(python), *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=300,
        )

    def installed(*modules: str) -> dict:
        probe = subprocess.run(
            [str(python), "-c", PROBE, *modules], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120
        )
        assert probe.returncode == 0, probe.stderr
        return json.loads(probe.stdout)

    first = pip("install", "-q", "--no-compile", "--find-links", str(wheels), "rlf-nl2sql")
    assert first.returncode == 0, first.stderr
    assert {"rlfcore", "rlf-nl2sql"} <= set(installed()["dists"]), "rlf-nl2sql did not bring the core along"
    others = pip(
        "install",
        "-q",
        "--no-compile",
        "--find-links",
        str(wheels),
        *(d for d in PLUGINS.values() if d != "rlf-nl2sql"),
    )
    assert others.returncode == 0, others.stderr

    state = installed("rlfcore", *(d.replace("-", "_") for d in PLUGINS.values()))
    dists = state["dists"]
    assert set(PROJECTS) <= set(dists)
    assert not [n for n, editable in dists.items() if editable], "an editable install"
    assert not HEAVY & set(dists), f"a plugin pulled in {', '.join(sorted(HEAVY & set(dists)))}"
    outside = [f for f in state["files"] if not f.startswith(state["prefix"])]
    assert not outside, f"imported from outside the venv: {outside}"
    assert Path(state["files"][0]).read_bytes() == (ROOT / "rlfcore" / "__init__.py").read_bytes(), (
        "not the core built here"
    )

    rlf = str(env_dir / "bin" / "rlf")
    listing = subprocess.run(
        [rlf, "plugins", "list", "--json"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120
    )
    assert listing.returncode == 0, listing.stderr
    shown = {i["name"]: i for i in json.loads(listing.stdout)}
    assert {name: shown.get(name, {}).get("distribution") for name in PLUGINS} == PLUGINS
    assert not [name for name in PLUGINS if shown[name].get("error")], listing.stdout

    def check(name: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [rlf, "plugins", "check", name], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300
        )

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = dict(zip(PLUGINS, pool.map(check, PLUGINS)))
    failed = {name: r.stdout + r.stderr for name, r in results.items() if r.returncode != 0}
    assert not failed, failed
    for script in ("rlf-nl2sql", "rlf-deepsearch", "rlf-code"):
        helped = subprocess.run(
            [str(env_dir / "bin" / script), "--help"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60
        )
        assert helped.returncode == 0, f"{script}: {helped.stderr}"
