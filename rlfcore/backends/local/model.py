"""The policy model of a local run: loaded from a folder, or built tiny from the task's own text."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from filelock import FileLock

from rlfcore.chat import COMPACT_TEMPLATE, QWEN3_TEMPLATE, ByteChatTokenizer
from rlfcore.paths import resolve_path
from rlfcore.schema import ModelInit, RunConfig


def resolve(path: str | None, base: Path) -> Path | None:
    """A config path, relative to the config's folder (:func:`rlfcore.paths.resolve_path`)."""
    return None if path is None else resolve_path(path, base)


def texts_of(files: list[Path], template: str, tools: list[dict[str, Any]] | None = None) -> Iterator[str]:
    """Every string in the rows of ``files``, and each conversation rendered with ``template`` and
    ``tools``, so the tokenizer learns the prompt's fixed parts (tool list, special layout) too."""
    renderer = ByteChatTokenizer(template)

    def strings(value: Any) -> Iterator[str]:
        if isinstance(value, str):
            yield value
        elif isinstance(value, dict):
            for v in value.values():
                yield from strings(v)
        elif isinstance(value, list):
            for v in value:
                yield from strings(v)

    for path in files:
        with path.open() as f:
            for line in f:
                if not line.strip():
                    continue
                row = json.loads(line)
                yield from strings(row)
                messages = row.get("messages") or (row.get("prompt") if isinstance(row.get("prompt"), list) else None)
                if messages:
                    yield renderer.render(messages, tools, add_generation_prompt=False)


def ensure_model(config: RunConfig, base: Path, tools: list[dict[str, Any]] | None = None) -> Path:
    """``model.path``, built first from ``model.init`` when the folder has no model yet: on a
    tokenizer trained on the task's text, or on the real tokenizer folder ``model.init.tokenizer``.

    One process builds it while others started at once wait (a lock in the folder), and the build
    goes into a folder beside it whose files are moved in with ``config.json`` last: a folder with
    ``config.json`` is whole, a failed build leaves nothing, and an interrupted one is done again."""
    path = resolve(config.model.path, base)
    if path is None:
        raise ValueError("the config names no model: set model.path (and model.init to build a tiny one there)")
    if (path / "config.json").exists():
        return path
    init = config.model.init
    if init is None:
        raise FileNotFoundError(f"model.path {path} has no model, and model.init is not set to build one")
    created = not path.exists()
    path.mkdir(parents=True, exist_ok=True)
    try:
        with FileLock(path / ".rlf-build.lock"):
            if not (path / "config.json").exists():
                work = Path(tempfile.mkdtemp(prefix=f".{path.name}.partial-", dir=path.parent))
                try:
                    _build(config, init, base, tools, work)
                    path.mkdir(exist_ok=True)  # a failed build beside this one may have removed it
                    for built in sorted(work.iterdir(), key=lambda f: f.name == "config.json"):
                        os.replace(built, path / built.name)
                finally:
                    shutil.rmtree(work, ignore_errors=True)
    except BaseException:
        if created:  # the folder this call made holds nothing but its lock: a failed build leaves nothing
            shutil.rmtree(path, ignore_errors=True)
        raise
    return path


def _build(config: RunConfig, init: ModelInit, base: Path, tools: list[dict[str, Any]] | None, out: Path) -> None:
    sizes = {
        "hidden_size": init.hidden_size,
        "num_layers": init.num_layers,
        "num_heads": init.num_heads,
        "num_kv_heads": init.num_kv_heads,
        "intermediate_size": init.intermediate_size,
        "seed": config.seed,
    }
    if init.tokenizer is not None:
        from rlfcore.tinymodel import build_on_tokenizer

        source = resolve_path(init.tokenizer, base)
        if not source.is_dir():
            raise FileNotFoundError(f"model.init.tokenizer: no such folder: {source}")
        build_on_tokenizer(source, out, **sizes)
        return
    from rlfcore.tinymodel import build_tiny

    template = COMPACT_TEMPLATE if init.template == "compact" else QWEN3_TEMPLATE
    files = [p for p in (resolve(t, base) for t in init.texts) if p is not None]
    missing = [str(p) for p in files if not p.exists()]
    if missing:
        raise FileNotFoundError(f"model.init.texts: no such file: {', '.join(missing)}")
    texts = list(texts_of(files, template, tools))
    build_tiny(texts, out, vocab_size=init.vocab_size, template=template, **sizes)


def load_policy(path: Path, device: str = "auto", dtype: str = "auto") -> tuple[Any, Any]:
    """The model (in training mode, in ``dtype`` as the engine reads it) and its Hugging Face tokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlfcore.engines.transformers import resolve_device, resolve_dtype

    model = AutoModelForCausalLM.from_pretrained(path, dtype=resolve_dtype(dtype), local_files_only=True)
    model.to(resolve_device(device))  # type: ignore[arg-type]  # transformers types .to for its own decorator
    model.train()
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    return model, tokenizer


def start_policy(config: RunConfig, base_model: Path, start: Path) -> tuple[Any, Any]:
    """The policy a training phase starts from, and its tokenizer: the model in ``start`` (full
    fine-tuning), or with ``trainer.lora`` ``base_model`` with adapters: those saved in ``start`` when
    it is not the base model itself (the SFT warm start's), else fresh ones."""
    settings = config.trainer.lora
    if settings is None:
        return load_policy(start, config.trainer.device, config.model.dtype)
    from rlfcore.backends.local import lora

    model, tokenizer = load_policy(base_model.resolve(), config.trainer.device, config.model.dtype)
    return lora.wrap(model, settings, None if start == base_model else start), tokenizer


def tool_schemas(runtime: Any) -> list[dict[str, Any]]:
    """The schemas of every tool the run offers, for the tokenizer's training text."""
    return [t.schema() for tools in runtime.tools.values() for t in tools.values()]
