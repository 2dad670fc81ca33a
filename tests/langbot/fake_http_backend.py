"""A fake backend for LangBot's HTTP bot adapter, a streaming surface.

It plays the part of the system an operator connects with that adapter: it
posts a person's messages to the bot's webhook (signed with the inbound
secret, HMAC-SHA256 as the adapter documents) and receives LangBot's replies
on a callback URL on 127.0.0.1, recording each (streamed parts, then the
final one). Uses `aiohttp`, which LangBot ships.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import socket
import time
from typing import Any

import aiohttp
from aiohttp import web


def sign(secret: str, body: bytes) -> dict[str, str]:
    """The adapter's signature headers for `body`."""
    timestamp = str(int(time.time()))
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return {"X-LB-Timestamp": timestamp, "X-LB-Signature": f"sha256={digest}"}


def parts_text(parts: Any) -> str:
    """The text of a reply's message parts."""
    if not isinstance(parts, list):
        return ""
    return "".join(str(p.get("text") or "") for p in parts if isinstance(p, dict) and p.get("type") == "Plain")


class FakeHttpBackend:
    """One backend: a callback server, and the bot's webhook to post to."""

    def __init__(self, secret: str) -> None:
        self.secret = secret
        self.webhook = ""
        #: Every callback LangBot made, in order: {"action", "payload", "text", "final", "signed", "at"}.
        self.actions: list[dict[str, Any]] = []
        self.changed = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.callback_url = ""

    async def listen(self) -> str:
        """Start the callback server; returns its URL."""
        app = web.Application()
        app.router.add_post("/callback", self._callback)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        await web.SockSite(self._runner, sock).start()
        self.callback_url = f"http://127.0.0.1:{sock.getsockname()[1]}/callback"
        return self.callback_url

    async def _callback(self, request: web.Request) -> web.Response:
        body = await request.read()
        stamp = request.headers.get("X-LB-Timestamp", "")
        digest = hmac.new(self.secret.encode(), f"{stamp}.".encode() + body, hashlib.sha256).hexdigest()
        payload = json.loads(body)
        self.actions.append({
            "action": "callback",
            "payload": payload,
            "text": parts_text(payload.get("message")),
            "final": bool(payload.get("is_final")),
            "signed": request.headers.get("X-LB-Signature") == f"sha256={digest}",
            "at": time.time(),
        })
        self.changed.set()
        return web.json_response({"ok": True})

    async def send_private(self, user_id: int, text: str, nickname: str = "Ada") -> None:
        """A person's message, posted to the bot's webhook."""
        body = json.dumps({
            "session_id": str(user_id),
            "session_type": "person",
            "sender": {"id": str(user_id), "name": nickname},
            "message": [{"type": "Plain", "text": text}],
        }).encode()
        headers = {"Content-Type": "application/json", **sign(self.secret, body)}
        async with aiohttp.ClientSession() as session:
            async with session.post(self.webhook, data=body, headers=headers) as resp:
                if resp.status >= 300:
                    raise RuntimeError(f"the webhook answered {resp.status}: {await resp.text()}")

    def sends(self, since: int = 0) -> list[dict[str, Any]]:
        """The replies LangBot finished, from callback `since` on (streamed
        parts before a final one update that same reply)."""
        return [a for a in self.actions[since:] if a["final"]]

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
