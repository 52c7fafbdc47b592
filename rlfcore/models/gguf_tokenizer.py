"""A Hugging Face tokenizer built from a GGUF file's own metadata, not from transformers' reading of it.

transformers 5.10 reads a GGUF's vocabulary and merges correctly but not the rest, measured on
SmolLM2: it makes ``<|im_start|>`` the end-of-sequence token (the GGUF says id 2, ``<|im_end|>``),
leaves no pad token, asks for spaces to be cleaned up when decoding (which transformers then
ignores for BPE, with a warning), gives a byte-level BPE a SentencePiece decoder with byte fallback,
drops llama.cpp's pre-tokenizer (for ``smollm``: each digit on its own), and takes 15 s doing it. This module builds the byte-level BPE
from the GGUF's tokens and merges, with the specials its token types and ids name, in 3 s.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["GGUFMeta", "GGUFTokenizerError", "read_meta", "tokenizer_from_gguf", "tokenizer_from_meta"]

_CONTROL = 3  # llama.cpp's token types: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte
_USER_DEFINED = 4
_BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
# llama.cpp's pre-tokenizer names (tokenizer.ggml.pre) rlf knows, as `tokenizers` pre-tokenizers:
# `smollm` splits each digit off before GPT-2's regex; `gpt2` and `default` are GPT-2's regex alone.
_PRE: dict[str, list[dict[str, Any]]] = {
    "smollm": [{"type": "Digits", "individual_digits": True}, _BYTE_LEVEL],
    "gpt2": [_BYTE_LEVEL],
    "default": [_BYTE_LEVEL],
}


class GGUFTokenizerError(ValueError):
    """A GGUF's tokenizer is of a kind this module does not rebuild."""


@dataclass(frozen=True)
class GGUFMeta:
    """What a GGUF says about its model and tokenizer (the parts rlf uses)."""

    architecture: str
    context_length: int | None
    tokenizer_model: str  # "gpt2" (byte-level BPE) or "llama" (SentencePiece), as llama.cpp names them
    pre_tokenizer: str | None
    tokens: list[str]
    token_types: list[int]
    merges: list[str]
    special_ids: dict[str, int]  # "bos", "eos", "unknown", "padding": the ids the GGUF names
    add_bos: bool
    chat_template: str | None
    parameters: int  # elements in all tensors: the model's size once de-quantised

    def special_tokens(self) -> list[tuple[int, str]]:
        """The tokens llama.cpp treats as control tokens: special in Hugging Face's terms."""
        return [(i, t) for i, (t, k) in enumerate(zip(self.tokens, self.token_types)) if k == _CONTROL]


def read_meta(path: Path) -> GGUFMeta:
    """The metadata of the GGUF at ``path`` (memory-mapped; the tensors are not read)."""
    from gguf import GGUFReader

    reader = GGUFReader(str(path))
    fields = reader.fields

    def value(key: str) -> Any:
        return fields[key].contents() if key in fields else None

    arch = value("general.architecture")
    ids = {k: value(f"tokenizer.ggml.{k}_token_id") for k in ("bos", "eos", "unknown", "padding")}
    return GGUFMeta(
        architecture=arch,
        context_length=value(f"{arch}.context_length"),
        tokenizer_model=value("tokenizer.ggml.model"),
        pre_tokenizer=value("tokenizer.ggml.pre"),
        tokens=value("tokenizer.ggml.tokens") or [],
        token_types=value("tokenizer.ggml.token_type") or [],
        merges=value("tokenizer.ggml.merges") or [],
        special_ids={k: v for k, v in ids.items() if v is not None},
        add_bos=bool(value("tokenizer.ggml.add_bos_token")),
        chat_template=value("tokenizer.chat_template"),
        parameters=sum(int(t.n_elements) for t in reader.tensors),
    )


def _spec(meta: GGUFMeta) -> dict[str, Any]:
    """``tokenizer.json`` of a byte-level BPE GGUF: GPT-2's pipeline, the GGUF's specials flagged."""
    if meta.tokenizer_model != "gpt2":
        raise GGUFTokenizerError(
            f"tokenizer model {meta.tokenizer_model!r}: only byte-level BPE ('gpt2') GGUF tokenizers are rebuilt"
        )
    if (meta.pre_tokenizer or "default") not in _PRE:
        raise GGUFTokenizerError(
            f"pre-tokenizer {meta.pre_tokenizer!r} is not one rlf knows ({', '.join(_PRE)}): "
            "add its splits to rlfcore/models/gguf_tokenizer.py"
        )
    pre = _PRE[meta.pre_tokenizer or "default"]
    specials = dict(meta.special_tokens())
    added = specials | {i: t for i, (t, k) in enumerate(zip(meta.tokens, meta.token_types)) if k == _USER_DEFINED}
    bos = meta.special_ids.get("bos")
    post: dict[str, Any] = {**_BYTE_LEVEL, "add_prefix_space": True, "trim_offsets": False}
    if meta.add_bos and bos is not None:
        name = meta.tokens[bos]
        post = {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": name, "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}}], "pair": [{"SpecialToken": {"id": name, "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                "special_tokens": {name: {"id": name, "ids": [bos], "tokens": [name]}}}  # fmt: skip
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {
                "id": i,
                "content": t,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": i in specials,
            }
            for i, t in sorted(added.items())
        ],
        "normalizer": None,
        "pre_tokenizer": pre[0] if len(pre) == 1 else {"type": "Sequence", "pretokenizers": pre},
        "post_processor": post,
        "decoder": _BYTE_LEVEL,
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,  # every byte has a token
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": {t: i for i, t in enumerate(meta.tokens)},
            "merges": [m.split(" ", 1) for m in meta.merges],
        },
    }


def tokenizer_from_gguf(path: Path, chat_template: str | None = None, pad_token: str | None = None) -> Any:
    """A Hugging Face fast tokenizer for the GGUF at ``path`` (see :func:`tokenizer_from_meta`)."""
    return tokenizer_from_meta(read_meta(path), chat_template, pad_token)


def tokenizer_from_meta(meta: GGUFMeta, chat_template: str | None = None, pad_token: str | None = None) -> Any:
    """A Hugging Face fast tokenizer for a GGUF's metadata (read once: reading takes seconds).

    Its bos, eos and unknown tokens are the GGUF's; ``pad_token`` replaces the GGUF's padding token
    (SmolLM2's is its end of turn, which a loss that masks padding would then never see);
    ``chat_template`` replaces the GGUF's template. Decoding never cleans up spaces.
    """
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    names = {k: meta.tokens[i] for k, i in meta.special_ids.items()}
    tok = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(json.dumps(_spec(meta))),
        bos_token=names.get("bos"),
        eos_token=names.get("eos"),
        unk_token=names.get("unknown"),
        pad_token=pad_token or names.get("padding"),
        clean_up_tokenization_spaces=False,
        model_max_length=meta.context_length or int(1e30),
    )
    tok.chat_template = chat_template or meta.chat_template
    return tok
