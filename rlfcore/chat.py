"""Chat templates and the tokenizer interface the loop needs.

The loop renders messages with the model's chat template and works on token ids from then on. Any
Hugging Face tokenizer with a chat template fits (:class:`HFChatTokenizer`); :class:`ByteChatTokenizer`
is a dependency-free stand-in (bytes plus special tokens, rendered with :data:`QWEN3_TEMPLATE`) for
``rlf plugins check`` and tests that need no model.
"""

from __future__ import annotations

import hashlib
import json
import re
from functools import cache, cached_property
from typing import TYPE_CHECKING, Any, Protocol

from rlfcore.types import Message

if TYPE_CHECKING:
    from jinja2 import Template
    from jinja2.sandbox import ImmutableSandboxedEnvironment

SPECIAL_TOKENS: tuple[str, ...] = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
)
"""Qwen-style special tokens, also used by the tiny models rlf builds."""

END_OF_TURN = "<|im_end|>"

END_OF_TURN_TOKENS: tuple[str, ...] = (END_OF_TURN, "<|eot_id|>", "<|eom_id|>")
"""Tokens that end an assistant turn in the families rlf knows (ChatML; Llama 3.x's end of turn and
end of message, the latter after a call Llama 3.1 makes in its ``ipython`` mode)."""

# Our own Qwen3-style templates: tools listed in the system turn, calls as <tool_call>{json}</tool_call>,
# consecutive tool results grouped in one user turn, and the reasoning (<think>...</think>) of
# assistant turns before the last user message dropped, as Qwen3's own template does.
_TEMPLATE = r"""
{%- set ns = namespace(last_user=-1) -%}
{%- for m in messages -%}{%- if m.role == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}{%- endfor -%}
{%- if tools -%}
{{- '<|im_start|>system\n' -}}
{%- if messages and messages[0].role == 'system' -%}{{- messages[0].content + '\n\n' -}}{%- endif -%}
@@TOOLS@@
{%- elif messages and messages[0].role == 'system' -%}
{{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' -}}
{%- endif -%}
{%- for m in messages -%}
{%- if m.role == 'system' and loop.first -%}
{%- elif m.role == 'assistant' -%}
{%- set content = m.content or '' -%}
{%- if loop.index0 < ns.last_user and '</think>' in content -%}{%- set content = content.split('</think>')[-1].lstrip('\n') -%}{%- endif -%}
{{- '<|im_start|>assistant\n' + content -}}
{%- for c in (m.tool_calls or []) -%}
{%- set f = c.function if c.function is defined else c -%}
{%- if content or not loop.first -%}{{- '\n' -}}{%- endif -%}
{{- '<tool_call>\n{"name": ' + (f.name | tojson) + ', "arguments": ' + ((f.arguments | tojson) if f.arguments is mapping else f.arguments) + '}\n</tool_call>' -}}
{%- endfor -%}
{{- '<|im_end|>\n' -}}
{%- elif m.role == 'tool' -%}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}
{{- '\n<tool_response>\n' + (m.content | string) + '\n</tool_response>' -}}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' -%}{{- '<|im_end|>\n' -}}{%- endif -%}
{%- else -%}
{{- '<|im_start|>' + m.role + '\n' + (m.content | string) + '<|im_end|>\n' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}
"""

_FULL_TOOLS = r"""
{{- '# Tools\nYou may call these functions:\n<tools>\n' -}}
{%- for t in tools -%}{{- t | tojson -}}{{- '\n' -}}{%- endfor -%}
{{- '</tools>\nTo call one, write <tool_call>{"name": NAME, "arguments": {...}}</tool_call>.<|im_end|>\n' -}}
""".strip()

_COMPACT_TOOLS = r"""
{{- 'Tools:\n' -}}
{%- for t in tools -%}{%- set f = t.function if t.function is defined else t -%}
{{- '- ' + f.name + '(' + ((f.parameters.properties or {}) | list | join(', ')) + '): ' + (f.description or '') + '\n' -}}
{%- endfor -%}
{{- 'Call: <tool_call>{"name": NAME, "arguments": {...}}</tool_call><|im_end|>\n' -}}
""".strip()

QWEN3_TEMPLATE = _TEMPLATE.replace("@@TOOLS@@", _FULL_TOOLS)
"""Tools as full JSON schemas, as Qwen3's template lists them."""
COMPACT_TEMPLATE = _TEMPLATE.replace("@@TOOLS@@", _COMPACT_TOOLS)
"""Tools as one line each, ``- name(arg, ...): description``: a third of the tokens, for tiny models."""


class ChatTokenizer(Protocol):
    """What the loop needs of a tokenizer."""

    @property
    def eos_token_ids(self) -> list[int]: ...

    def render(
        self, messages: list[Message], tools: list[dict[str, Any]] | None, add_generation_prompt: bool
    ) -> str: ...

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...


def render_template(
    template: str, messages: list[Message], tools: list[dict[str, Any]] | None, add_generation_prompt: bool
) -> str:
    """Render a Jinja chat template the way Hugging Face does (trimmed blocks, ``tojson``)."""
    return _compile(template).render(
        messages=messages, tools=tools or None, add_generation_prompt=add_generation_prompt
    )


_TEMPLATES: dict[str, Template] = {}


def _compile(template: str) -> Template:
    if template not in _TEMPLATES:
        env = _template_environment()(trim_blocks=True, lstrip_blocks=True)
        env.filters["tojson"] = lambda v, indent=None: json.dumps(v, ensure_ascii=False, indent=indent)
        _TEMPLATES[template] = env.from_string(template)
    return _TEMPLATES[template]


_DICT_ATTRIBUTES = frozenset(dir(dict))


@cache
def _template_environment() -> type[ImmutableSandboxedEnvironment]:
    """Jinja's immutable sandbox, its attribute verdicts remembered per (object type, attribute name).

    The sandbox decides from those two alone (a leading underscore, a function's internals, a
    mutating method of a list, dict, set or deque), but its ``isinstance`` checks against abstract
    base classes cost more than the rest of a chat template's rendering, paid on every attribute a
    template reads, on every turn of every trajectory."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Environment(ImmutableSandboxedEnvironment):
        def __init__(self, **options: Any):
            super().__init__(**options)
            self.verdicts: dict[tuple[type, str], bool] = {}

        def getattr(self, obj: Any, attribute: str) -> Any:
            # A message's ``m.role``: Jinja tries the attribute first and, for a plain dict, pays for
            # an AttributeError (and a KeyError when the key is missing too) before it answers. A name
            # no dict attribute has is the key, or Jinja's undefined for it, at once.
            if type(obj) is dict and attribute not in _DICT_ATTRIBUTES:
                return obj[attribute] if attribute in obj else self.undefined(obj=obj, name=attribute)
            return super().getattr(obj, attribute)

        def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
            key = (type(obj), attr)
            verdict = self.verdicts.get(key)
            if verdict is None:
                verdict = self.verdicts[key] = super().is_safe_attribute(obj, attr, value)
            return verdict

    return Environment


class ByteChatTokenizer:
    """UTF-8 bytes as tokens 0-255, then the special tokens: a real, model-free tokenizer."""

    BYTES = 256
    """Ids below are bytes; the special tokens follow."""

    def __init__(self, template: str = QWEN3_TEMPLATE, special_tokens: tuple[str, ...] = SPECIAL_TOKENS):
        self.template = template
        self.special = {tok: self.BYTES + i for i, tok in enumerate(special_tokens)}
        self.inverse = {v: k for k, v in self.special.items()}
        self._split = re.compile("(" + "|".join(re.escape(t) for t in special_tokens) + ")")

    @property
    def vocab_size(self) -> int:
        return self.BYTES + len(self.special)

    @cached_property
    def eos_token_ids(self) -> list[int]:
        return [self.special[END_OF_TURN], self.special["<|endoftext|>"]]

    def render(self, messages: list[Message], tools: list[dict[str, Any]] | None, add_generation_prompt: bool) -> str:
        return render_template(self.template, messages, tools, add_generation_prompt)

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        for piece in self._split.split(text):
            if piece in self.special:
                ids.append(self.special[piece])
            elif piece:
                ids.extend(piece.encode("utf-8"))
        return ids

    def decode(self, ids: list[int]) -> str:
        # Runs of bytes decode at once between the special tokens (every turn decodes its tokens).
        out, start = [], 0
        for k in [k for k, i in enumerate(ids) if i >= self.BYTES]:
            out.append(bytes(ids[start:k]).decode("utf-8", errors="replace"))
            out.append(self.inverse.get(ids[k], ""))
            start = k + 1
        out.append(bytes(ids[start:]).decode("utf-8", errors="replace"))
        return "".join(out)


class HFChatTokenizer:
    """Adapter for a Hugging Face tokenizer that has a chat template."""

    def __init__(self, tokenizer: Any, template_kwargs: dict[str, Any] | None = None):
        self.tok = tokenizer
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError(f"tokenizer {getattr(tokenizer, 'name_or_path', tokenizer)!r} has no chat template")
        self.template_kwargs = dict(template_kwargs or {})
        """Extra variables for the template (``enable_thinking`` for Qwen3), from ``model.chat_template_kwargs``."""

    @property
    def template(self) -> str:
        template: str = self.tok.chat_template  # checked present in __init__
        return template

    @property
    def template_name(self) -> str:
        """The template, for error messages: its tokenizer folder and the start of its sha256."""
        return (
            f"{getattr(self.tok, 'name_or_path', '') or 'tokenizer'} (chat template {template_digest(self.template)})"
        )

    @cached_property
    def eos_token_ids(self) -> list[int]:
        ids = []
        for tok in (*END_OF_TURN_TOKENS, self.tok.eos_token):
            if tok is not None and tok in self.tok.get_vocab():
                tid = self.tok.convert_tokens_to_ids(tok)
                if isinstance(tid, int) and tid != self.tok.unk_token_id and tid not in ids:
                    ids.append(tid)
        return ids

    def render(self, messages: list[Message], tools: list[dict[str, Any]] | None, add_generation_prompt: bool) -> str:
        text: str = self.tok.apply_chat_template(  # not tokenized: the text
            messages,
            tools=tools or None,
            add_generation_prompt=add_generation_prompt,
            tokenize=False,
            **self.template_kwargs,
        )
        return text

    def encode(self, text: str) -> list[int]:
        return list(self.tok.encode(text, add_special_tokens=False))

    def decode(self, ids: list[int]) -> str:
        text: str = self.tok.decode(ids, skip_special_tokens=False)
        return text


def load_tokenizer(path: str, template_kwargs: dict[str, Any] | None = None) -> HFChatTokenizer:
    """A local Hugging Face tokenizer folder, offline, wrapped for the loop."""
    from transformers import AutoTokenizer

    return HFChatTokenizer(AutoTokenizer.from_pretrained(path, local_files_only=True), template_kwargs)


def template_digest(template: str) -> str:
    """The first 8 hex digits of a template's sha256, as docs/models.md names the real ones."""
    return hashlib.sha256(template.encode()).hexdigest()[:8]


def reads_reasoning(tokenizer: ChatTokenizer) -> bool:
    """Whether the chat template renders an assistant message's ``reasoning_content`` (Qwen3's do),
    so the loop records a turn's ``<think>`` block there rather than in ``content``."""
    return "reasoning_content" in (getattr(tokenizer, "template", None) or "")
