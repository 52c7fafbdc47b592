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
