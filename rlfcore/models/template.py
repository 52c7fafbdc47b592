"""The chat template rlf gives model families whose own template has no tools (SmolLM2's ChatML).

SmolLM2's template renders ``<|im_start|>ROLE\\nCONTENT<|im_end|>\\n`` and nothing about tools. This
one renders every conversation without tools exactly as SmolLM2's does (its default system prompt
included) and adds one convention, Hermes-style as in Qwen2.5:

- tools: the system turn (the first message's, or the default prompt) is followed by a blank line,
  ``# Tools``, an instruction, the tools' JSON schemas one a line between ``<tools>`` and
  ``</tools>``, and how to write a call;
- calls: an assistant turn's text, then each call as ``<tool_call>\\n{"name": NAME, "arguments":
  {...}}\\n</tool_call>`` on its own line (read by rlf's ``hermes`` parser);
- tool results: each in its own turn of role ``tool``, ``<|im_start|>tool\\nRESULT<|im_end|>\\n``, in
  the order of the calls.

``rlf models fetch`` writes it into the model folder (``chat_template.jinja``), so transformers'
``apply_chat_template``, vLLM and verl all render the same text.
"""

from __future__ import annotations

SMOLLM2_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
"""The system prompt SmolLM2's own template puts first when a conversation has none."""

CHATML_TOOLS_TEMPLATE = (
    r"""{%- set default_system = '"""
    + SMOLLM2_SYSTEM
    + r"""' -%}
{%- set has_system = messages and messages[0].role == 'system' -%}
{%- set system = messages[0].content if has_system else default_system -%}
{%- if messages or tools -%}
{{- '<|im_start|>system\n' + system -}}
{%- if tools -%}
{{- '\n\n# Tools\n\nYou can call one or more functions to help with the request. Their signatures are listed between <tools> and </tools>:\n<tools>' -}}
{%- for tool in tools -%}{{- '\n' + (tool | tojson) -}}{%- endfor -%}
{{- '\n</tools>\n\nTo call a function, write a JSON object with its name and arguments between <tool_call> and </tool_call>:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>' -}}
{%- endif -%}
{{- '<|im_end|>\n' -}}
{%- endif -%}
{%- for message in messages -%}
{%- if not (loop.first and has_system) -%}
{%- set content = message.content if message.content is string else ((message.content | tojson) if message.content is not none else '') -%}
{{- '<|im_start|>' + message.role + '\n' + content -}}
{%- if message.role == 'assistant' and message.tool_calls -%}
{%- for call in message.tool_calls -%}
{%- set f = call.function if call.function is defined else call -%}
{%- if content or not loop.first -%}{{- '\n' -}}{%- endif -%}
{{- '<tool_call>\n{"name": ' + (f.name | tojson) + ', "arguments": ' + (f.arguments if f.arguments is string else (f.arguments | tojson)) + '}\n</tool_call>' -}}
{%- endfor -%}
{%- endif -%}
{{- '<|im_end|>\n' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}
"""
)
"""SmolLM2's ChatML with Hermes-style tools, calls and ``tool`` turns (see the module's docstring)."""

TEMPLATES: dict[str, str] = {"chatml-tools": CHATML_TOOLS_TEMPLATE}
"""rlf's own templates by name, for :mod:`rlfcore.realmodels` and the model registry."""
