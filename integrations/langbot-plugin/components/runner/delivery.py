"""How a run's reply reaches the chat.

LangBot delivers what a runner yields only where `ctx.delivery.automatic_reply`
is true (Pipeline bindings), and over a surface that does not stream
(OneBot v11) only the run's last message; `ctx.delivery.supports_streaming`
does not tell which (a Pipeline's says true whatever the adapter). So
there a run that held several turns (follow-ups sent while it worked)
ends with one message carrying each turn's last words, and the answers to
commands sent meanwhile, in order: an ended turn's last message is not
given on its own, and a command's answer is given at once and again in
that message. Elsewhere (Agent bindings) it keeps the results
as the run's record and sends nothing, so the runner sends the reply itself:
streamed through `ctx.reply_stream()` where the run grants it, else once
through `ctx.reply`. Either way each reply reaches the chat once: the final
`message.completed` carries the run's metadata, and `run.completed` repeats no
message already given. A failed run reaches the person as a sentence. Files
from the harness's outbox follow the reply (`outbox`): sent after it where
the runner sends, images inside the final message where LangBot delivers.
What the bridge says of the conversation's project (the summary of what the
turn changed; a message marked `metadata.project`) follows the reply: sent
after it where the runner sends, at the end of the final message where
LangBot delivers. A question or an approval the harness asks
(`interaction.requested`) follows the reply too: as a card where the surface draws cards
(`ctx.delivery.interactions`), else as its text, which says how to answer
in words; the bridge reads the next message as the answer. A question the
running turn waits on (marked `in_turn`: a connection the agent's door
holds until the person allows it) is shown at once instead, the same way,
its text sent by the runner where LangBot does not deliver.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from langbot_plugin.api.entities.builtin.platform.message import File, Image, MessageChain
from langbot_plugin.api.entities.builtin.runner.interaction import InteractionRequest

from components.runner import failure_codes
from components.runner.outbox import Outbox

#: Seconds between two snapshots of a streamed reply: every surface that
#: edits a message in place (cards, edited messages) takes one a second.
STREAM_INTERVAL = 1.0
#: The most text LangBot takes in one reply (its reply stream's limit).
MAX_REPLY = 200_000
#: How much of a failure's first line the person is shown.
MAX_REASON = 400
#: Results that only keep books: a final message may wait behind them.
BOOKKEEPING = ("state.updated", "processor.log")
#: The tool LangBot sends explicit replies with.
REPLY_TOOL = "event_reply"
#: `action.requested`'s action for a card.
INTERACTION_REQUESTED = "interaction.requested"


def message_text(message: Any) -> str:
    """The text of a Protocol v1 message (a string, or text parts)."""
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text") or "")
            for part in content
            if isinstance(part, dict) and part.get("type") == "text"
        )
    return ""


def split_text(text: str, limit: int | None) -> list[str]:
    """`text` in pieces of at most `limit` characters, in order: each cut at
    the last paragraph break that fits, else line break, else space, else
    where the limit falls. The break itself is dropped."""
    limit = min(limit, MAX_REPLY) if isinstance(limit, int) and limit > 0 else MAX_REPLY
    parts: list[str] = []
    text = text or ""
    while len(text) > limit:
        window = text[: limit + 1]
        for sep in ("\n\n", "\n", " "):
            cut = window.rfind(sep)
            if cut > 0:
                parts.append(text[:cut])
                text = text[cut + len(sep):].lstrip("\n")
                break
        else:
            parts.append(text[:limit])
            text = text[limit:]
    if text.strip():
        parts.append(text)
    return parts


def _metadata(data: dict[str, Any]) -> dict[str, Any]:
    """What the bridge said of a message (`message.metadata`), or nothing."""
    message = data.get("message") if isinstance(data.get("message"), dict) else {}
    metadata = message.get("metadata")
    return metadata if isinstance(metadata, dict) else {}


def _of_project(data: dict[str, Any]) -> bool:
    """Whether a message is the bridge's word on the conversation's project."""
    return "project" in _metadata(data)


def _command_of(data: dict[str, Any]) -> str | None:
    """The chat command a message answers, when the bridge answered one."""
    command = _metadata(data).get("command")
    return command if isinstance(command, str) else None


def _in_turn(data: dict[str, Any]) -> bool:
    """Whether a message is the bridge's answer to a command sent while a
    turn works, in that turn's stream."""
    return _command_of(data) is not None and bool(_metadata(data).get("in_turn"))


def _stop_answer(data: dict[str, Any]) -> bool:
    """Whether a message is the bridge's answer to a `/stop` it carried out."""
    return _command_of(data) == "stop" and not _metadata(data).get("refused")


def failure_sentence(label: str, data: dict[str, Any]) -> str:
    """What the person reads when a run fails: the first line of the error
    (the rest is for the operator's log: stderr, paths of notices)."""
    if data.get("code") == failure_codes.CANCELLED:
        # Someone stopped it (a `/stop` of its own run, the host): not the
        # harness failing.
        return f"{label} stopped before it finished: the turn was cancelled."
    lines = str(data.get("error") or "").strip().splitlines()
    reason = lines[0].strip() if lines else "it stopped without saying why"
    if len(reason) > MAX_REASON:
        reason = reason[: MAX_REASON - 1].rstrip() + "…"
    # The bridge's own errors often name the harness already; a limit the
    # operator set is the operator's word, not the harness's failing.
    own = reason.startswith(label) or data.get("code") == failure_codes.LIMIT_REACHED
    sentence = reason if own else f"{label} could not answer: {reason}"
    if data.get("retryable"):
        sentence += " Try again in a moment."
    return sentence


def _log(run_id: str, text: str, level: str) -> dict[str, Any]:
    return {"run_id": run_id, "type": "processor.log", "data": {"text": text, "level": level}}


class _Aborted(Exception):
    """Ends a reply stream without sending what it buffered."""


class Reply:
    """The reply a runner sends itself (automatic_reply false)."""

    def __init__(self, ctx: Any, limit: int | None) -> None:
        self.ctx = ctx
        self.limit = limit
        tools = {t.tool_name: t for t in ctx.resources.tools}
        tool = tools.get(REPLY_TOOL)
        #: Whether the run may send at all: LangBot grants `event_reply`
        #: to runners declaring tool calling (`permissions.tools: [call]`).
        self.granted = tool is not None and (not tool.operations or "call" in tool.operations)
        self.streams = self.granted and bool(getattr(ctx.context.available_apis, "reply_stream", False))
        self._cm: Any = None
        self._stream: Any = None
        self._snapshot = ""
        self._shown = ""
        self._wake = asyncio.Event()
        # Held while a snapshot is on its way: the pump is never stopped
        # halfway through one.
        self._showing = asyncio.Lock()
        self._pump: asyncio.Task | None = None
        self._broken: BaseException | None = None

    def progress(self, text: str) -> None:
        """The reply so far; shown at most once per STREAM_INTERVAL."""
        if not self.streams or self._broken is not None:
            return
        parts = split_text(text, self.limit)
        self._snapshot = parts[0] if parts else ""
        if self._pump is None:
            # Created inside the run's task: it carries the run's `ctx.api`.
            self._pump = asyncio.create_task(self._show())
        self._wake.set()

    async def _show(self) -> None:
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                text = self._snapshot
                if text and text != self._shown:
                    async with self._showing:
                        if self._stream is None:
                            self._cm = self.ctx.reply_stream()
                            self._stream = await self._cm.__aenter__()
                        await self._stream.update(text)
                        self._shown = text
                    await asyncio.sleep(STREAM_INTERVAL)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the final send decides what to do
            self._broken = exc

    async def _stop_pump(self) -> None:
        if self._pump is not None:
            async with self._showing:
                self._pump.cancel()
            try:
                await self._pump
            except asyncio.CancelledError:
                pass
            self._pump = None

    async def send(self, text: str) -> int:
        """Send `text` (split to the surface's size) once; returns how many
        messages it took. Raises what the host answered when it cannot."""
        await self._stop_pump()
        parts = split_text(text, self.limit)
        if not parts:
            await self.close()
            return 0
        rest = parts
        if self.streams and self._broken is None:
            try:
                if self._stream is None:
                    self._cm = self.ctx.reply_stream()
                    self._stream = await self._cm.__aenter__()
                await self._stream.update(parts[0])
            except Exception as exc:  # noqa: BLE001 - nothing finished yet: plain replies instead
                self._broken = exc
                await self.close()
            else:
                # Finishing is what sends on a surface that cannot edit: if
                # it fails, whether it was sent is unknown, and it is not
                # sent again.
                cm, self._cm, self._stream = self._cm, None, None
                await cm.__aexit__(None, None, None)
                rest = parts[1:]
        for part in rest:
            await self.ctx.reply(part)
        return len(parts)

    async def close(self) -> None:
        """Stop streaming; a stream still open ends without sending what it
        buffered (a cancelled or failed run's half answer)."""
        await self._stop_pump()
        cm, self._cm, self._stream = self._cm, None, None
        if cm is not None:
            try:
                await cm.__aexit__(_Aborted, _Aborted("the reply was abandoned"), None)
            except Exception:  # noqa: BLE001 - the host closes it with the run anyway
                pass


class Delivery:
    """One run's results on their way to LangBot, and its reply to the chat."""

    def __init__(self, ctx: Any, label: str, outbox: Outbox | None = None) -> None:
        self.ctx = ctx
        self.label = label
        self.automatic = bool(ctx.delivery.automatic_reply)
        self.reply = None if self.automatic else Reply(ctx, ctx.delivery.max_message_size)
        self.outbox = outbox or Outbox.from_config({})
        self._held: dict[str, Any] | None = None
        #: Where the surface draws cards, LangBot executes a yielded request.
        self.cards = getattr(ctx.delivery, "interactions", None) is not None
        #: The turn's question for the person: a card to yield after the
        #: reply, or the text to send with it.
        self._card: dict[str, Any] | None = None
        self._question = ""
        #: What the bridge said of the project, to follow the reply.
        self._project: list[str] = []
        #: The bridge's answer to the person's `/stop`, for the run's end.
        self._stopped: dict[str, Any] | None = None
        #: Where LangBot delivers (and may show only the run's last
        #: message): each ended turn's last words and each in-turn
        #: command's answer, in order, for the final message to carry.
        self._earlier: list[str] = []

    async def shape(self, results: AsyncIterator[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
        """The results to yield, in order; sends the reply on the way when
        the host will not."""
        try:
            async with aclosing(results) as taken:
                async for result in taken:
                    async for out in self._take(result):
                        yield out
        finally:
            if self.reply is not None:
                await self.reply.close()

    def turn_over(self) -> None:
        """The run's turn has ended and a follow-up's turn begins: the
        ended turn's last words go into the run's final message, not on
        their own (where LangBot delivers, they would be shown twice where
        each message is shown, and lost where only the last is)."""
        if self._held is not None:
            held = self._release()
            text = message_text(held["data"].get("message"))
            if text:
                self._earlier.append(text)

    def _release(self) -> dict[str, Any] | None:
        held, self._held = self._held, None
        return held

    async def _take(self, result: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        kind = result.get("type")
        data = result.get("data") if isinstance(result.get("data"), dict) else {}
        if kind in BOOKKEEPING:
            yield result
            return
        if kind == "artifact.created":
            # Kept for the end of the run; LangBot ignores the result itself,
            # and its bytes do not belong in the run's record.
            line = self.outbox.take(data)
            if line is not None:
                yield _log(result.get("run_id"), *line)
            return
        if kind == "action.requested" and data.get("action") == INTERACTION_REQUESTED and result.get("in_turn"):
            # The running turn waits on the answer: shown now.
            async for out in self._ask_now(result, data):
                yield out
            return
        if kind == "action.requested" and data.get("action") == INTERACTION_REQUESTED:
            # Kept for after the reply; a held message stays held.
            self._ask(result, data)
            return
        if kind == "run.completed":
            async for out in self._completed(result, data):
                yield out
            return
        if kind == "message.completed" and _stop_answer(data):
            # The bridge's answer to `/stop`: the run's last word once it
            # ends stopped, after whatever the turn still had on its way.
            self._stopped = result
            return
        if kind == "message.completed" and _in_turn(data):
            # Its answer to another command sent while the turn works
            # (`/status`): given now, not held as the turn's words are
            # (which stay held: they may be the turn's last).
            if self.automatic:
                self._earlier.append(message_text(data.get("message")))
            yield result
            return
        if kind in ("run.completed", "run.failed") and self._stopped is not None:
            async for out in self._after_stop(result, data):
                yield out
            return
        if kind == "message.completed" and _of_project(data):
            # Follows the reply, whichever message that turns out to be.
            self._project.append(message_text(data.get("message")))
            return
        if kind == "run.failed" and self.automatic and self._earlier:
            # The run's earlier turns' answers, before its failure: never
            # lost with the turn that failed.
            message = {"role": "assistant", "content": self._after_earlier("")}
            yield {"run_id": result.get("run_id"), "type": "message.completed", "data": {"message": message}}
        held = self._release()
        if held is not None:
            yield held
        if kind == "message.completed":
            # Held until the next result tells whether it is the final one.
            self._held = result
        elif kind == "run.failed":
            async for out in self._failed(result, data):
                yield out
        else:
            if kind == "message.delta" and self.reply is not None:
                chunk = data.get("chunk") or {}
                self.reply.progress(str(chunk.get("all_content") or ""))
            yield result

    async def _after_stop(self, result: dict[str, Any], data: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """The run's end after the person's `/stop`: stopped, the answer is
        its final message, delivered as a completed run's; ended some other
        way first, the answer still reaches the chat before that end."""
        answer, self._stopped = self._stopped, None
        held = self._release()
        if held is not None:
            yield held
        self._held = answer
        if result.get("type") == "run.failed" and data.get("code") == failure_codes.CANCELLED:
            done = {"run_id": result.get("run_id"), "type": "run.completed", "data": {"finish_reason": "cancelled"}}
            async for out in self._completed(done, done["data"]):
                yield out
            return
        async for out in self._take(result):
            yield out

    async def _ask_now(self, result: dict[str, Any], data: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """A question the running turn waits on, shown at once: a card
        where the surface draws one (the bridge's mark left off: LangBot
        drops a result with a field it does not know), else its text —
        yielded where LangBot delivers (and kept for the run's last
        message, which is all some surfaces show), sent where the runner
        replies."""
        drawn, text = self._question_of(data)
        if drawn:
            yield {k: v for k, v in result.items() if k != "in_turn"}
            return
        if not text:
            return
        if self.automatic:
            self._earlier.append(text)
            message = {"role": "assistant", "content": text}
            yield {"run_id": result.get("run_id"), "type": "message.completed", "data": {"message": message}}
        elif self.reply is not None and self.reply.granted:
            try:
                await self.ctx.reply(text)
            except Exception as exc:  # noqa: BLE001 - said in the run's record
                yield _log(result.get("run_id"), f"the question could not reach the chat: {exc}", "warning")

    def _question_of(self, data: dict[str, Any]) -> tuple[bool, str]:
        """Whether a question is drawn as a card here (one LangBot accepts,
        checked here: LangBot fails the whole run on one it refuses, and an
        Agent binding's person then hears nothing), and its text."""
        payload = data.get("payload") if isinstance(data.get("payload"), dict) else {}
        text = str(payload.get("fallback_text") or payload.get("title") or "").strip()
        if not self.cards:
            return False, text
        try:
            InteractionRequest.model_validate(payload)
        except Exception:  # noqa: BLE001 - the text still asks
            return False, text
        return True, text

    def _ask(self, result: dict[str, Any], data: dict[str, Any]) -> None:
        """Keep the turn's question: its card, else its text."""
        drawn, text = self._question_of(data)
        if drawn:
            self._card = result
        else:
            self._question = text

    def _after_earlier(self, last: str) -> str:
        """`last` after the run's earlier turns' words and in-turn answers,
        in order (taken: each is said once)."""
        earlier, self._earlier = self._earlier, []
        return "\n\n".join(t for t in [*earlier, last] if t)

    def _with_earlier(self, message: dict[str, Any]) -> None:
        """Where LangBot delivers, the run's earlier words open its final
        message."""
        if self._earlier:
            message["content"] = self._after_earlier(message_text(message))

    def _with_question(self, message: dict[str, Any]) -> None:
        """Where LangBot delivers the final message, what the bridge said of
        the project and the question's text end it."""
        for extra in [*self._project, self._question]:
            if extra:
                text = message_text(message)
                message["content"] = f"{text}\n\n{extra}" if text else extra

    async def _completed(self, result: dict[str, Any], data: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        async for out in self._answer(result, data):
            yield out
            if out.get("type") == "run.failed":
                return  # the reply could not be sent: that ends the run
        if self._card is not None:
            # After the reply: LangBot sends the card (or, where a card
            # cannot go, its text) as it takes the result.
            yield self._card
        yield result

    async def _answer(self, result: dict[str, Any], data: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        final = data.get("message") if isinstance(data.get("message"), dict) else None
        held = self._release()
        if held is not None:
            given = held["data"]
            if final is None or message_text(final) == message_text(given.get("message")):
                # The message already given is the final one: it carries the
                # run's metadata, and run.completed does not say it again.
                if final is not None:
                    given["message"] = final
                data.pop("message", None)
            final = given.get("message") if final is None else final
            last = data.get("message") if isinstance(data.get("message"), dict) else given.get("message")
            if self.reply is None and isinstance(last, dict):
                self._with_earlier(last)
                self._with_question(last)
                self._attach(last)
            yield held
        elif self.reply is None and (self.outbox.files or self._question or self._project or self._earlier):
            if final is not None:
                self._with_earlier(final)
                self._with_question(final)
                self._attach(final)
            else:
                # Files, a question or earlier turns' words, but none of
                # the last turn's own: they are the answer.
                message = {"role": "assistant", "content": ""}
                self._with_earlier(message)
                self._with_question(message)
                self._attach(message)
                yield {"run_id": result.get("run_id"), "type": "message.completed", "data": {"message": message}}
        if self.reply is None:
            return
        if not self.reply.granted:
            yield self._unsendable(result)
            return
        try:
            await self.reply.send(self._after_earlier(message_text(final)))
        except Exception as exc:  # noqa: BLE001 - told as the run's failure
            error = f"the reply could not be sent to the chat: {type(exc).__name__}: {exc}"
            yield _log(result.get("run_id"), error, "error")
            yield {"run_id": result.get("run_id"), "type": "run.failed",
                   "data": {"error": error, "code": failure_codes.DELIVERY_FAILED, "retryable": True}}
            return
        for said in self._project:
            try:
                await self.reply.send(said)
            except Exception as exc:  # noqa: BLE001 - the record keeps it
                yield _log(result.get("run_id"), f"the project's summary could not be sent to the chat: {exc}", "error")
        async for out in self._send_files(result.get("run_id")):
            yield out
        if self._question:
            try:
                await self.reply.send(self._question)
            except Exception as exc:  # noqa: BLE001 - the record keeps it
                yield _log(result.get("run_id"), f"the question could not be sent to the chat: {exc}", "error")

    def _attach(self, message: dict[str, Any]) -> None:
        """Where LangBot delivers the final message (a Pipeline binding), its
        images ride in it as `image_base64` parts, and a sentence names the
        files that cannot: one message, sent once."""
        images = self.outbox.sendable(images_only=True)
        notice = self.outbox.notice(self.label)
        if not images and not notice:
            return
        text = message_text(message)
        if notice:
            text = f"{text}\n\n{notice}" if text else notice
        parts: list[dict[str, Any]] = [{"type": "text", "text": text}]
        parts += [{"type": "image_base64", "image_base64": f.data_url} for f in images]
        message["content"] = parts

    async def _send_files(self, run_id: Any) -> AsyncIterator[dict[str, Any]]:
        """Where the runner sends (an Agent binding): the images in one
        message, each other file in one of its own, after the reply; a
        sentence names what the chat did not take."""
        files = self.outbox.sendable()
        images = [f for f in files if f.image]
        batches = ([images] if images else []) + [[f] for f in files if not f.image]
        for batch in batches:
            chain = MessageChain([
                Image(base64=f.data_url) if f.image else File(name=f.name, size=f.size, base64=f.data_url)
                for f in batch
            ])
            try:
                await self.ctx.reply(chain)
            except Exception as exc:  # noqa: BLE001 - named in the notice below
                self.outbox.miss(batch, "the chat did not take it")
                names = ", ".join(f.name for f in batch)
                yield _log(run_id, f"outbox files {names} not sent: {type(exc).__name__}: {exc}", "warning")
        notice = self.outbox.notice(self.label)
        if notice:
            try:
                await self.reply.send(notice)
            except Exception as exc:  # noqa: BLE001 - the record keeps it
                yield _log(run_id, f"{notice} (not told in the chat: {exc})", "error")

    async def _failed(self, result: dict[str, Any], data: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        if self.reply is not None and not self.reply.granted:
            yield self._unsendable(result)
        elif self.reply is not None:
            try:
                # The run's earlier turns' answers first: never lost with
                # the turn that failed.
                await self.reply.send(self._after_earlier(failure_sentence(self.label, data)))
            except Exception as exc:  # noqa: BLE001 - the failure itself still ends the run
                yield _log(result.get("run_id"), f"the failure could not be told in the chat: {exc}", "error")
            else:
                # What the harness wrote before it failed is still its work.
                async for out in self._send_files(result.get("run_id")):
                    yield out
        elif self.outbox.files:
            names = ", ".join(f.name for f in self.outbox.files)
            text = f"outbox files {names} not sent: LangBot tells a failed run by its failure hint alone"
            yield _log(result.get("run_id"), text, "warning")
        # Without a reply of its own (a Pipeline binding), LangBot tells the
        # person itself: the pipeline's failure hint.
        yield result

    @staticmethod
    def _unsendable(result: dict[str, Any]) -> dict[str, Any]:
        text = (
            "this binding does not deliver what the runner yields and grants it no "
            f"{REPLY_TOOL} tool: the reply stays in the run's record and does not reach the chat"
        )
        return _log(result.get("run_id"), text, "warning")
