"""askq.answered_by: a settlement's `by` (made for programs) as a person reads it."""

from __future__ import annotations

import pytest

from askq import answered_by


@pytest.mark.parametrize(
    ("by", "words"),
    [
        (None, "answered"),
        ("timeout", "answered with the ask's default (nobody answered in time)"),
        ("slack:U0123 (bob)", "answered in Slack by bob"),
        ("slack:U0123", "answered in Slack by U0123"),
        ("teams:00000000-0000-0000-0000-0000000000a1 (Ana Lima)", "answered in Teams by Ana Lima"),
        ("discord:80351110224678912 (nelly)", "answered in Discord by nelly"),
        ("webhook:pager-bot", "answered through a webhook by pager-bot"),
        ("web:carol (ops)", "answered in the web inbox by carol (ops)"),  # a web name as given
        ("email:alice@example.com", "answered in an email reply by alice@example.com"),
        ("web-link:teams:0000-a1 (Ana)", "answered through a link from Teams by Ana"),
        ("web-link:discord:8035 (nelly)", "answered through a link from Discord by nelly"),
        ("web-link:slack:U0123 (bob)", "answered through a link from Slack by bob"),
        ("auto:policy=recommended", "answered by rules (policy=recommended)"),
        ("pagerduty:bot-7", "answered by pagerduty:bot-7"),  # a channel of its own
        ("ops", "answered by ops"),
    ],
)
def test_who_answered_reads_as_a_sentence(by: str | None, words: str) -> None:
    assert answered_by(by) == words
