"""A fake IM client for LangBot's OneBot v11 adapter (reverse WebSocket).

It plays the part of a OneBot implementation (the program that would
connect a QQ account): it connects to the bot's endpoint on LangBot with the
bot's access token, announces itself with a lifecycle meta event, sends
private messages and group members' messages as they would arrive, and
answers every action LangBot calls (`send_msg`, `send_group_msg`,
`get_group_info`, ...) as an implementation does, recording each one.
Standard library and `websockets` (which LangBot ships) only.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from typing import Any

from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

#: Actions that put a message in the chat.
SENDS = ("send_msg", "send_private_msg", "send_group_msg")


def message_text(message: Any) -> str:
    """The text of a OneBot message: an array of segments, or a string."""
    if isinstance(message, str):
        return message
    if isinstance(message, list):
        return "".join(
            str((seg.get("data") or {}).get("text") or "")
            for seg in message
            if isinstance(seg, dict) and seg.get("type") == "text"
        )
    return ""


class FakeOneBot:
    """One connected account: `self_id`, talking to one LangBot bot."""

    def __init__(self, url: str, token: str, self_id: str) -> None:
        self.url = url
        self.token = token
        self.self_id = self_id
        #: Every action LangBot called, in order: {"action", "params", "text"?, "at"}.
        self.actions: list[dict[str, Any]] = []
        self.changed = asyncio.Event()
        self._ids = itertools.count(1000)
        self._socket = None
        self._task: asyncio.Task | None = None

    async def connect(self, timeout: float = 60) -> None:
        """Connect (retrying while the bot's adapter is still loading), then
        announce the connection."""
        headers = {
            "Authorization": f"Bearer {self.token}",
            "X-Client-Role": "Universal",
            "X-Self-ID": self.self_id,
        }
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._socket = await connect(self.url, additional_headers=headers, proxy=None)
                break
            except (InvalidStatus, OSError) as exc:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"cannot connect to {self.url}: {exc}") from exc
                await asyncio.sleep(0.5)
        self._task = asyncio.create_task(self._serve())
        await self._post({"post_type": "meta_event", "meta_event_type": "lifecycle", "sub_type": "connect"})

    async def _post(self, event: dict[str, Any]) -> None:
        await self._socket.send(json.dumps({"time": int(time.time()), "self_id": int(self.self_id), **event}))

    async def send_private(self, user_id: int, text: str, nickname: str = "Ada") -> int:
        """A person's private message to the bot; returns its message id."""
        message_id = next(self._ids)
        await self._post({
            "post_type": "message",
            "message_type": "private",
            "sub_type": "friend",
            "message_id": message_id,
            "user_id": user_id,
            "message": [{"type": "text", "data": {"text": text}}],
            "raw_message": text,
            "font": 0,
            "sender": {"user_id": user_id, "nickname": nickname, "sex": "unknown", "age": 0},
        })
        return message_id

    async def send_group(self, group_id: int, user_id: int, text: str, card: str = "",
                         mention: bool = True) -> int:
        """A member's message in group `group_id`, as a OneBot v11
        implementation posts it (go-cqhttp, NapCat): `sender` with the
        member's nickname, group card and role; with `mention`, it starts by
        mentioning the bot (an `at` segment for `self_id`, as a person's
        "@bot" arrives). Returns its message id."""
        message_id = next(self._ids)
        segments = [{"type": "text", "data": {"text": text}}]
        raw = text
        if mention:
            segments.insert(0, {"type": "at", "data": {"qq": self.self_id}})
            segments[1]["data"]["text"] = f" {text}"
            raw = f"[CQ:at,qq={self.self_id}] {text}"
        await self._post({
            "post_type": "message",
            "message_type": "group",
            "sub_type": "normal",
            "message_id": message_id,
            "group_id": group_id,
            "user_id": user_id,
            "anonymous": None,
            "message": segments,
            "raw_message": raw,
            "font": 0,
            "sender": {
                "user_id": user_id, "nickname": f"qq{user_id}", "card": card, "sex": "unknown",
                "age": 0, "area": "", "level": "1", "role": "member", "title": "",
            },
        })
        return message_id

    def _data(self, action: str, params: dict[str, Any]) -> dict[str, Any]:
        """What an implementation answers `action` with."""
        if action == "get_group_info":
            group_id = params.get("group_id")
            return {"group_id": group_id, "group_name": f"team {group_id}", "member_count": 3,
                    "max_member_count": 200}
        if action == "get_group_member_info":
            user_id = params.get("user_id")
            return {"group_id": params.get("group_id"), "user_id": user_id, "nickname": f"qq{user_id}",
                    "card": "", "role": "member", "title": ""}
        return {"message_id": next(self._ids)}

    async def _serve(self) -> None:
        """Answer every action frame as a OneBot implementation does."""
        async for raw in self._socket:
            try:
                frame = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(frame, dict) or "action" not in frame:
                continue
            action, params = frame.get("action"), frame.get("params") or {}
            record = {"action": action, "params": params, "at": time.time()}
            if action in SENDS:
                record["text"] = message_text(params.get("message"))
            self.actions.append(record)
            self.changed.set()
            reply = {"status": "ok", "retcode": 0, "data": self._data(action, params), "echo": frame.get("echo")}
            await self._socket.send(json.dumps(reply))

    def sends(self, since: int = 0) -> list[dict[str, Any]]:
        """The messages LangBot put in the chat, from action `since` on."""
        return [a for a in self.actions[since:] if a["action"] in SENDS]

    async def close(self) -> None:
        if self._socket is not None:
            await self._socket.close()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
