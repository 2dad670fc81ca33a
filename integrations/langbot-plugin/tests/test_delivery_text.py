"""The texts a run's reply and failure become in the chat."""

import random

import pytest

from components.runner.delivery import MAX_REASON, MAX_REPLY, failure_sentence, message_text, split_text


def test_a_text_within_the_limit_is_one_piece():
    assert split_text("hello world", 20) == ["hello world"]


def test_nothing_to_say_is_no_piece():
    assert split_text("", 10) == []
    assert split_text(None, 10) == []
    assert split_text("  \n\n ", 10) == []


def test_a_cut_prefers_a_paragraph_break_to_a_later_space():
    assert split_text("aaaa\n\nbb cc dd", 9) == ["aaaa", "bb cc dd"]


def test_a_cut_falls_back_to_a_line_break_then_a_space():
    assert split_text("aaa\nbbb ccc", 9) == ["aaa", "bbb ccc"]
    assert split_text("aaa bbb ccc", 8) == ["aaa bbb", "ccc"]


def test_a_word_longer_than_the_limit_is_cut_where_the_limit_falls():
    assert split_text("abcdefgh", 3) == ["abc", "def", "gh"]


def test_the_break_and_the_blank_lines_after_it_are_dropped():
    assert split_text("aaa\n\n\n\nbbb", 4) == ["aaa", "bbb"]


@pytest.mark.parametrize("limit", [None, 0, -5, "100"])
def test_no_usable_limit_means_the_hosts_own(limit):
    text = "x" * (MAX_REPLY + 1)
    assert [len(p) for p in split_text(text, limit)] == [MAX_REPLY, 1]


def test_a_limit_over_the_hosts_is_the_hosts():
    assert len(split_text("x" * (MAX_REPLY + 1), MAX_REPLY * 2)) == 2


def test_pieces_fit_and_keep_every_word_in_order():
    rng = random.Random(7)
    alphabet = ["a", "b", "word", " ", "\n", "\n\n", "longerword"]
    for _ in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80)))
        limit = rng.randint(1, 30)
        parts = split_text(text, limit)
        assert all(0 < len(p) <= limit for p in parts), (text, limit, parts)
        # Only whitespace (the breaks cut at) is ever dropped.
        assert "".join("".join(parts).split()) == "".join(text.split())


def test_message_text_reads_a_string_or_the_text_parts():
    assert message_text({"content": "hi"}) == "hi"
    parts = [
        {"type": "text", "text": "a"},
        {"type": "image_base64", "image_base64": "x"},
        {"type": "text", "text": "b"},
    ]
    assert message_text({"content": parts}) == "ab"
    assert message_text({"content": None}) == ""
    assert message_text(None) == ""
    assert message_text("not a message") == ""


def test_a_failure_is_told_by_its_first_line():
    said = failure_sentence("Codex", {"error": "model overloaded\nstderr: a long trace"})
    assert said == "Codex could not answer: model overloaded"


def test_a_failure_naming_the_harness_is_told_as_it_is():
    assert failure_sentence("Codex", {"error": "Codex is not installed"}) == "Codex is not installed"
    # A budget the operator set is said as the bridge says it.
    over = {"error": "You have used 10 tokens today, ...", "code": "limit_reached"}
    assert failure_sentence("Codex", over) == "You have used 10 tokens today, ..."


def test_a_failure_without_a_reason_still_says_so():
    assert failure_sentence("Gemini CLI", {}) == "Gemini CLI could not answer: it stopped without saying why"
    assert failure_sentence("Gemini CLI", {"error": "  \n"}).endswith("it stopped without saying why")


def test_a_retryable_failure_asks_to_try_again():
    said = failure_sentence("Kimi Code", {"error": "busy", "retryable": True})
    assert said == "Kimi Code could not answer: busy Try again in a moment."


def test_a_long_reason_is_shortened():
    said = failure_sentence("Qwen Code", {"error": "why " * 500})
    reason = said.removeprefix("Qwen Code could not answer: ")
    assert len(reason) <= MAX_REASON
    assert reason.endswith("…")
    assert reason.startswith("why why")
