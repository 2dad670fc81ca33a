"""Files the harness writes to its workspace's `outbox/`, on their way to
the person in the chat.

The bridge reports each outbox file as `artifact.created` with its bytes
inline (up to 1 MiB; a larger file comes by name and size only, the reason
in `metadata.withheld`). LangBot 4.11 ignores `artifact.created` from a
runner and has no artifact API; its Box sandbox (export, then `file_ids`)
needs a box runtime. Without it, the released host still takes a reply
message with parts: `ctx.reply(MessageChain([...]))` goes to the platform
adapter intact (Agent bindings), and a yielded message's `image_base64`
parts become images (Pipeline bindings, which turn no other file part into
a file). This module keeps what came within the operator's limits and
words what did not: a file that does not reach the chat is named, with its
size and why, never left unsaid.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any

#: The default limits: one file, and all of a run's files together. The
#: bridge relays at most 1 MiB of a file, so a larger per-file limit
#: changes nothing.
FILE_LIMIT_KB = 1024
TURN_LIMIT_KB = 4096
#: The most files sent for one run; more are named, not sent.
MAX_FILES = 10
#: How many missed files a notice names one by one.
MAX_NAMED = 10
#: How many files the run's record lists one by one: a harness may write
#: thousands, and each line is a result LangBot keeps.
MAX_LOGGED = 20

#: Leading bytes of the image formats every IM surface shows, by MIME type.
_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


def sniff_image(data: bytes) -> str | None:
    """The image type of `data` by its content (png, jpeg, gif, webp): a
    file's name says nothing about what it holds."""
    for magic, mime in _MAGIC:
        if data.startswith(magic):
            return mime
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def size_text(size: int) -> str:
    """A size as a person reads it."""
    if size < 1024:
        return f"{size} bytes"
    if size < 1024 * 1024:
        return f"{size / 1024:.1f} KB"
    return f"{size / (1024 * 1024):.1f} MB"


def _limit_kb(value: Any, default: int) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        return default
    return max(number, 0)


@dataclass
class OutFile:
    """One outbox file: its bytes when they came and fit, else why not."""

    name: str
    size: int
    data: bytes | None = None
    image: str | None = None
    missed: str | None = None

    @property
    def data_url(self) -> str:
        """The bytes as a data URL: the form LangBot's adapters read."""
        mime = self.image or "application/octet-stream"
        return f"data:{mime};base64,{base64.b64encode(self.data or b'').decode()}"


class Outbox:
    """One run's outbox files, within the operator's limits."""

    def __init__(self, file_limit: int, turn_limit: int) -> None:
        self.file_limit = file_limit
        self.turn_limit = turn_limit
        self.files: list[OutFile] = []
        self._kept = 0
        self._count = 0

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Outbox:
        """The limits from the plugin's settings (`file_limit_kb`,
        `turn_file_limit_kb`; 0 sends no file, only names them)."""
        return cls(
            _limit_kb(config.get("file_limit_kb"), FILE_LIMIT_KB) * 1024,
            _limit_kb(config.get("turn_file_limit_kb"), TURN_LIMIT_KB) * 1024,
        )

    def take(self, artifact: dict[str, Any]) -> tuple[str, str] | None:
        """Keep one `artifact.created` payload; the line and level for the
        run's record (None past the first MAX_LOGGED files and one line
        saying so)."""
        line = self._take(artifact)
        count = len(self.files)
        if count <= MAX_LOGGED:
            return line
        if count == MAX_LOGGED + 1:
            return f"more than {MAX_LOGGED} outbox files: the rest are not listed here", "warning"
        return None

    def _take(self, artifact: dict[str, Any]) -> tuple[str, str]:
        name = str(artifact.get("name") or artifact.get("artifact_id") or "a file")
        content = artifact.get("content_base64")
        content = content if isinstance(content, str) else None
        size = artifact.get("size_bytes")
        if not isinstance(size, int) or size < 0:
            size = len(content) * 3 // 4 if content else 0
        file = OutFile(name=name, size=size)
        self.files.append(file)
        # Decided on the size the bridge reports before anything is decoded:
        # past a limit, the bytes are not even looked at.
        file.missed = self._over(size)
        if file.missed is None and content is None:
            relay = size_text(FILE_LIMIT_KB * 1024)
            file.missed = f"over the {relay} limit for one file"
            withheld = (artifact.get("metadata") or {}).get("withheld")
            return f"outbox file {name} not sent: {withheld or 'its content did not come'}", "warning"
        data = None
        if file.missed is None:
            try:
                data = base64.b64decode(content, validate=True)
            except (binascii.Error, ValueError):
                file.missed = "its content did not come whole"
            else:
                # The bytes, not what was said of them, count.
                file.size = len(data)
                file.missed = self._over(len(data))
        if file.missed:
            return f"outbox file {name} ({file.size} bytes) not sent: {file.missed}", "warning"
        file.data = data
        file.image = sniff_image(data)
        self._kept += len(data)
        self._count += 1
        kind = file.image or "file"
        return f"outbox file {name} ({size} bytes, {kind}) kept for the chat", "info"

    def _over(self, size: int) -> str | None:
        """Why a file of `size` bytes cannot join what is kept, if it cannot."""
        if not self.file_limit or not self.turn_limit:
            return "files are not sent to this chat"
        if size > self.file_limit:
            return f"over the {size_text(self.file_limit)} limit for one file"
        if self._kept + size > self.turn_limit:
            return f"over the {size_text(self.turn_limit)} limit for one answer's files"
        if self._count >= MAX_FILES:
            return f"more than {MAX_FILES} files in one answer"
        return None

    def sendable(self, images_only: bool = False) -> list[OutFile]:
        """The files to send (only the images where no other file can go;
        the rest are marked missed)."""
        out = []
        for file in self.files:
            if file.missed or file.data is None:
                continue
            if images_only and not file.image:
                file.missed = "only images can be sent here"
                continue
            out.append(file)
        return out

    def miss(self, files: list[OutFile], why: str) -> None:
        """Mark files the chat did not take."""
        for file in files:
            file.missed = why

    def notice(self, label: str) -> str | None:
        """The sentence naming every file that did not reach the chat, or
        None when all did."""
        missed = [f for f in self.files if f.missed]
        if not missed:
            return None
        named = ", ".join(f"{f.name} ({size_text(f.size)}, {f.missed})" for f in missed[:MAX_NAMED])
        if len(missed) > MAX_NAMED:
            named += f", and {len(missed) - MAX_NAMED} more"
        return (
            f"{label} wrote files that could not be sent here: {named}. "
            "They stay in the conversation's workspace, in outbox/."
        )
