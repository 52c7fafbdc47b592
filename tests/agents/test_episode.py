"""An episode's count of generated tokens, kept as segments grow and as a builder drops tokens."""

from __future__ import annotations

from typing import Any

from rlfcore.agents.episode import Episode
from rlfcore.types import Message


class DroppingTokens:
    """A stand-in builder (rlf's own renders for real in the gateway's tests): each message is one
    token, and every continuation drops the last generated token, as verl's builders may."""

    def prompt_ids(self, messages: list[Message], tools: list[dict[str, Any]] | None) -> list[int]:
        return list(range(len(messages)))

    def context_ids(
        self, tokens: list[int], before: list[Message], after: list[Message], tools: list[dict[str, Any]] | None
    ) -> tuple[int, list[int]]:
        return 1, [7] * (len(after) - len(before) + 1)


def test_the_generated_count_follows_the_mask_through_answers_and_drops() -> None:
    episode = Episode(DroppingTokens())  # type: ignore[arg-type]
    messages: list[Message] = [{"role": "user", "content": "q"}]
    for turn in range(5):
        seg, _ = episode.place(messages, None)
        answer: Message = {"role": "assistant", "content": f"a{turn}"}
        Episode.answered(seg, [1, 2, 3], None, answer, cut=False)
        messages = [*messages, answer, {"role": "user", "content": f"u{turn}"}]
        assert episode.generated() == sum(seg.response_mask) == seg.generated
    assert episode.generated() == 5 * 3 - 4  # each of the four continuations dropped one generated token
    fork, _ = episode.place([{"role": "user", "content": "other"}], None)
    Episode.answered(fork, [9, 9], None, {"role": "assistant", "content": "b"}, cut=False)
    assert episode.generated() == 11 + 2
