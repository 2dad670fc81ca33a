"""Outbox files on their way to the chat: what is kept, and what is told."""

import base64

import pytest

from components.runner.outbox import MAX_FILES, MAX_LOGGED, MAX_NAMED, Outbox, size_text, sniff_image

PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 24


def artifact(name, data=None, size=None, **more):
    payload = {"name": name, **more}
    if data is not None:
        payload["content_base64"] = base64.b64encode(data).decode()
    if size is not None:
        payload["size_bytes"] = size
    elif data is not None:
        payload["size_bytes"] = len(data)
    return payload


@pytest.mark.parametrize(
    ("data", "mime"),
    [
        (PNG, "image/png"),
        (b"\xff\xd8\xff\xe0rest", "image/jpeg"),
        (b"GIF87a...", "image/gif"),
        (b"GIF89a...", "image/gif"),
        (b"RIFF\0\0\0\0WEBPVP8 ", "image/webp"),
        (b"RIFF\0\0\0\0WAVEfmt ", None),
        (b"%PDF-1.7", None),
        (b"", None),
    ],
)
def test_an_image_is_known_by_its_bytes(data, mime):
    assert sniff_image(data) == mime


@pytest.mark.parametrize(
    ("size", "text"),
    [(0, "0 bytes"), (1023, "1023 bytes"), (1536, "1.5 KB"), (3 * 1024 * 1024, "3.0 MB")],
)
def test_sizes_read_as_a_person_reads_them(size, text):
    assert size_text(size) == text


def test_the_limits_come_from_the_settings():
    assert (Outbox.from_config({}).file_limit, Outbox.from_config({}).turn_limit) == (1024 * 1024, 4096 * 1024)
    box = Outbox.from_config({"file_limit_kb": "2", "turn_file_limit_kb": 3})
    assert (box.file_limit, box.turn_limit) == (2048, 3072)
    # Unreadable: the default; below zero: none.
    assert Outbox.from_config({"file_limit_kb": "lots"}).file_limit == 1024 * 1024
    assert Outbox.from_config({"file_limit_kb": -1}).file_limit == 0


def test_a_file_within_the_limits_is_kept_with_its_bytes():
    box = Outbox(10_000, 10_000)
    line = box.take(artifact("chart.png", PNG))
    assert line == (f"outbox file chart.png ({len(PNG)} bytes, image/png) kept for the chat", "info")
    (kept,) = box.sendable()
    assert kept.data == PNG
    assert kept.data_url == "data:image/png;base64," + base64.b64encode(PNG).decode()
    assert box.notice("Codex") is None


def test_a_file_that_is_not_an_image_goes_as_octet_stream():
    box = Outbox(10_000, 10_000)
    box.take(artifact("notes.txt", b"hello"))
    (kept,) = box.sendable()
    assert kept.image is None
    assert kept.data_url.startswith("data:application/octet-stream;base64,")


def test_a_file_over_the_limit_is_refused_by_its_reported_size_undecoded():
    box = Outbox(1024, 10_000)
    level = box.take({"name": "big.bin", "content_base64": "not base64 at all!", "size_bytes": 2048})[1]
    assert level == "warning"
    assert box.files[0].missed == "over the 1.0 KB limit for one file"
    assert box.sendable() == []


def test_the_bytes_not_the_reported_size_count():
    box = Outbox(1024, 10_000)
    box.take(artifact("liar.bin", b"x" * 2000, size=10))
    file = box.files[0]
    assert (file.size, file.missed) == (2000, "over the 1.0 KB limit for one file")


def test_a_file_the_bridge_withheld_is_named_with_the_reason():
    box = Outbox(10 * 1024 * 1024, 10 * 1024 * 1024)
    line, level = box.take({"name": "huge.zip", "size_bytes": 5_000_000, "metadata": {"withheld": "over 1 MiB"}})
    assert (line, level) == ("outbox file huge.zip not sent: over 1 MiB", "warning")
    assert box.files[0].missed == "over the 1.0 MB limit for one file"


def test_content_that_does_not_decode_is_not_sent():
    box = Outbox(10_000, 10_000)
    box.take({"name": "bad.bin", "content_base64": "@@@", "size_bytes": 2})
    assert box.files[0].missed == "its content did not come whole"


def test_an_answers_files_share_one_limit():
    box = Outbox(1024, 1024)
    box.take(artifact("a.bin", b"a" * 600))
    box.take(artifact("b.bin", b"b" * 600))
    assert [f.missed for f in box.files] == [None, "over the 1.0 KB limit for one answer's files"]


def test_no_limit_sends_no_file():
    box = Outbox(0, 1024)
    box.take(artifact("a.txt", b"a"))
    assert box.files[0].missed == "files are not sent to this chat"


def test_at_most_max_files_are_sent():
    box = Outbox(10_000, 10_000)
    for i in range(MAX_FILES + 1):
        box.take(artifact(f"f{i}.txt", b"x"))
    assert len(box.sendable()) == MAX_FILES
    assert box.files[-1].missed == f"more than {MAX_FILES} files in one answer"


def test_the_record_lists_the_first_files_then_says_there_are_more():
    box = Outbox(0, 0)
    lines = [box.take(artifact(f"f{i}.txt", b"x")) for i in range(MAX_LOGGED + 2)]
    assert all(line is not None for line in lines[:MAX_LOGGED])
    assert lines[MAX_LOGGED] == (f"more than {MAX_LOGGED} outbox files: the rest are not listed here", "warning")
    assert lines[MAX_LOGGED + 1] is None


def test_where_only_images_go_the_other_files_are_marked():
    box = Outbox(10_000, 10_000)
    box.take(artifact("chart.png", PNG))
    box.take(artifact("data.csv", b"a,b"))
    assert [f.name for f in box.sendable(images_only=True)] == ["chart.png"]
    assert box.files[1].missed == "only images can be sent here"


def test_the_notice_names_every_file_that_did_not_reach_the_chat():
    box = Outbox(10_000, 10_000)
    box.take(artifact("a.txt", b"aaa"))
    box.take(artifact("b.txt", b"bb"))
    box.miss(box.files[:1], "the chat did not take it")
    assert box.notice("Codex") == (
        "Codex wrote files that could not be sent here: a.txt (3 bytes, the chat did not take it). "
        "They stay in the conversation's workspace, in outbox/."
    )


def test_a_long_notice_counts_the_rest():
    box = Outbox(0, 0)
    for i in range(MAX_NAMED + 3):
        box.take(artifact(f"f{i}.txt", b"x"))
    notice = box.notice("Codex")
    assert f"f{MAX_NAMED - 1}.txt" in notice
    assert f"f{MAX_NAMED}.txt" not in notice
    assert ", and 3 more." in notice
