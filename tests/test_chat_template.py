"""The chat-template renderer: Jinja's immutable sandbox, with its attribute verdicts remembered per type."""

from __future__ import annotations

import pytest
from jinja2.exceptions import SecurityError

from rlfcore.chat import render_template


class Box:
    """Not a list, dict, set or deque: its ``append`` mutates nothing the sandbox guards."""

    def append(self) -> str:
        return "boxed"


def test_a_remembered_verdict_is_per_type_so_a_list_stays_immutable_after_a_safe_append():
    template = "{{ messages[0].content.append() }}|{{ messages.index(messages[0]) }}|{{ messages.append(1) }}"
    messages = [{"role": "user", "content": Box()}]
    for _ in range(2):  # the second rendering reads the remembered verdicts
        with pytest.raises(SecurityError, match="append"):
            render_template(template, messages, None, add_generation_prompt=False)
    assert messages == [{"role": "user", "content": messages[0]["content"]}]
    safe = "{{ messages[0].content.append() }}|{{ messages.index(messages[0]) }}"
    assert render_template(safe, messages, None, add_generation_prompt=False) == "boxed|0"


def test_private_attributes_stay_out_of_reach():
    for _ in range(2):
        with pytest.raises(SecurityError):
            render_template("{{ messages.__class__.__name__ }}", [], None, add_generation_prompt=False)


def test_rlf_s_jinja_reads_message_keys_as_jinja_s_own_sandbox_does():
    """The renderer's shortcut for a dict's keys answers as Jinja's sandbox would: the key, an
    undefined for a missing one, and a dict method where the name is one (``m.items``)."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    from rlfcore.chat import _template_environment

    source = (
        "{{ m.role }}|{{ m.missing is defined }}|{{ m.missing or 'none' }}|{{ m.items is defined }}"
        "|{{ m.get('role') }}|{{ (m.tool_calls or []) | length }}|{% if m.content %}C{% endif %}"
    )
    ours = _template_environment()(trim_blocks=True, lstrip_blocks=True).from_string(source)
    jinja = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).from_string(source)
    for m in ({"role": "user", "content": "hi"}, {"role": "tool", "content": "", "items": 3, "tool_calls": [1]}):
        assert ours.render(m=m) == jinja.render(m=m)
    assert ours.render(m={"role": "user", "content": "hi"}) == "user|False|none|True|user|0|C"
