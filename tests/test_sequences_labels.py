"""The template check's named differences: dropped reasoning only where the texts differ in it, the
model's own tokenization only where the texts are the same."""

from __future__ import annotations

from rlfcore.sequences import differs_in_reasoning_only, same_text


def test_equal_texts_never_differ_in_reasoning() -> None:
    assert not differs_in_reasoning_only("It is done.<|im_end|>", "It is done.<|im_end|>\n")
    assert not differs_in_reasoning_only("<think>a</think>x", "<think>a</think>x\n")
    assert same_text("It is done.<|im_end|>", "It is done.<|im_end|>\n")


def test_a_dropped_think_block_is_reasoning_and_not_the_same_text() -> None:
    ours, full = "<think>\n\n</think>\n\nHi<|im_end|>\nNext", "Hi<|im_end|>\nNext\n"
    assert differs_in_reasoning_only(ours, full) and not same_text(ours, full)


def test_a_cut_turn_is_the_start_of_its_rendering() -> None:
    assert same_text("It is do", "It is do<|im_end|>\n") and not same_text("It is dx", "It is do<|im_end|>\n")
