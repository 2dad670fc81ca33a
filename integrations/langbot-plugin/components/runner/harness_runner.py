"""The Runner behind every harness of this plugin: it relays the run to
harness-bridge, turns the bridge's results into RunnerResults the way
LangBot reads them, and hands them to `delivery` for the chat."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from pathlib import Path
from typing import Any

from langbot_plugin.api.definition.components.runner.runner import Runner
from langbot_plugin.api.entities.builtin.runner import RunnerContext, RunnerResult

from components.runner import failure_codes
from components.runner.bridge import (
    DEFAULT_PATH,
    RELAY,
    BridgeError,
    bridge_binary,
    budget_flags,
    limit_flags,
    log,
    parse_env,
    parse_projects,
    writable_dir,
)
from components.runner.delivery import Delivery, failure_sentence, message_text
from components.runner.outbox import Outbox

# Config keys that configure the launch, not the binding: they never reach
# the bridge inside the context (secrets among them). The MCP servers the
# form defines travel as operator configuration in the run frame; the
# context only names them.
LAUNCH_KEYS = ("api_key", "base_url", "extra_env", "harness_path", "mcp_servers")
#: Seconds the harness stops before the run's deadline (see harness_deadline).
DEADLINE_MARGIN = 10.0
#: Seconds between two pulls of the person's follow-ups while a turn runs.
STEERING_INTERVAL = 0.5
#: Results that end a turn on the bridge.
TERMINAL = ("run.completed", "run.failed")


#: Form fields whose binding key differs: the form says `timeout`, the
#: bridge's binding reads `timeout_seconds`.
FORM_TO_BINDING = {"timeout": "timeout_seconds"}


def binding_config(config: dict[str, Any]) -> dict[str, Any]:
    """The binding the bridge gets from the runner form: launch settings
    left out, form names turned into the binding's."""
    binding = {}
    for key, value in config.items():
        if key in LAUNCH_KEYS:
            continue
        binding[FORM_TO_BINDING.get(key, key)] = value
    return binding


#: How a turn ends that ends its run too, follow-ups waiting or not: a
#: stop someone asked for, or the run's time spent.
ENDS_THE_RUN = (failure_codes.CANCELLED, failure_codes.DEADLINE_EXCEEDED)


def _log(run_id: str, text: str, level: str = "info") -> dict[str, Any]:
    return {"run_id": run_id, "type": "processor.log", "data": {"text": text, "level": level}}


def _failed(run_id: str, error: str, code: str) -> dict[str, Any]:
    return {"run_id": run_id, "type": "run.failed", "data": {"error": error, "code": code, "retryable": False}}


def can_pull_steering(ctx: Any) -> bool:
    """Whether LangBot gives this run its follow-ups to pull (a Pipeline
    binding of a runner that declares `capabilities.steering`)."""
    apis = getattr(getattr(ctx, "context", None), "available_apis", None)
    return bool(getattr(apis, "steering_pull", False))


def follow_up_context(context: dict[str, Any], item: Any, run_id: str) -> dict[str, Any]:
    """The context of a follow-up's own turn: the run's, with the follow-up's
    event, input and sender. The run's state snapshot is left out: it predates the
    turn before, and the bridge reads the conversation's state itself."""
    turn = {k: v for k, v in context.items() if k != "state"}
    turn["run_id"] = run_id
    turn["event"] = item.event.model_dump(mode="json", exclude_none=True)
    turn["input"] = item.input.model_dump(mode="json", exclude_none=True)
    # Its sender's, not the run's: in a group another person's message is
    # theirs (their budget, their approvals, their commands).
    for key in ("actor", "subject"):
        part = getattr(item, key, None)
        if part is not None:
            turn[key] = part.model_dump(mode="json", exclude_none=True)
        else:
            turn.pop(key, None)
    return turn


def harness_deadline(deadline_at: float | None, now: float) -> float | None:
    """The deadline the harness gets: the run's, less a margin (10 s, at
    most a quarter of the time left). LangBot ends the run at its deadline;
    a harness stopped exactly then could not report why, nor the person be
    told."""
    if deadline_at is None:
        return None
    left = deadline_at - now
    return deadline_at - min(DEADLINE_MARGIN, max(left, 0) / 4)


class HarnessRunner(Runner):
    """Relays runs of `harness` to harness-bridge."""

    harness = ""
    #: The harness's name as the person in the chat reads it.
    label = ""
    #: Whether the runner declares `capabilities.steering` and pulls the
    #: person's follow-ups while a turn runs: a chat command goes to the
    #: bridge at once, the rest into the running turn where the harness
    #: takes it, else waits to run as the next turn. Every pulled one is
    #: run or answered (but behind a stop or the run's deadline: the
    #: record names those): LangBot drops what a run leaves unpulled.
    steering = False
    #: Variables the form's API key and base URL become.
    key_var = ""
    url_var = ""

    def launch(self, config: dict[str, Any]) -> tuple[dict[str, str], str | None]:
        """The harness's environment and program from the form's values."""
        env = parse_env(config.get("extra_env"))
        if config.get("api_key"):
            env[self.key_var] = str(config["api_key"])
        if config.get("base_url") and self.url_var:
            env[self.url_var] = str(config["base_url"])
        harness_path = str(config.get("harness_path") or "").strip() or None
        path = env.get("PATH", DEFAULT_PATH)
        if harness_path:
            path = f"{Path(harness_path).parent}:{path}"
        env["PATH"] = path
        env.setdefault("HOME", str(writable_dir("home")))
        return env, harness_path

    async def run(self, ctx: RunnerContext) -> AsyncGenerator[RunnerResult, None]:
        outbox = Outbox.from_config(self.get_plugin_config())
        delivery = Delivery(ctx, self.label or self.harness, outbox)
        async with aclosing(delivery.shape(self._results(ctx, delivery.turn_over))) as results:
            async for result in results:
                # LangBot numbers what a runner yields: the bridge's numbers
                # would collide with the results `ctx.api` adds (its replies).
                result.pop("sequence", None)
                result["run_id"] = ctx.run_id
                yield RunnerResult.model_validate(result)

    async def _results(self, ctx: RunnerContext, turn_over=lambda: None) -> AsyncIterator[dict[str, Any]]:
        """The run's results from the bridge, as LangBot reads them; every
        way it can end is one terminal result. `turn_over` is told when a
        follow-up's turn begins, once all of the turn before is taken."""
        config = dict(ctx.config or {})
        env, harness_path = self.launch(config)
        plugin_config = self.get_plugin_config()
        try:
            binary = bridge_binary(str(plugin_config.get("bridge_path") or "").strip() or None)
        except (BridgeError, OSError) as exc:
            yield _failed(ctx.run_id, str(exc), failure_codes.HARNESS_NOT_FOUND)
            return
        root = str(plugin_config.get("workspace_root") or "").strip()
        if root and not Path(root).is_absolute():
            # Relative to the plugin runtime's working folder, which the
            # operator neither sees nor chooses: refused, as bridge_path is.
            why = f"workspace_root must be an absolute path, got {root!r}"
            yield _failed(ctx.run_id, why, failure_codes.WORKSPACE_ERROR)
            return
        data_dir = Path(root) if root else writable_dir("data") / "harness-bridge"
        try:
            limits = limit_flags(plugin_config) + budget_flags(plugin_config, data_dir)
        except (BridgeError, OSError) as exc:
            yield _failed(ctx.run_id, str(exc), failure_codes.INVALID_ARGUMENT)
            return
        context = ctx.model_dump(mode="json", exclude_none=True)
        context["config"] = binding_config(config)
        deadline = harness_deadline(ctx.runtime.deadline_at, time.time())
        if deadline is not None:
            context.setdefault("runtime", {})["deadline_at"] = deadline
        servers = config.get("mcp_servers")
        servers = servers if isinstance(servers, dict) else {}
        if servers:
            context["config"]["mcp_servers"] = sorted(servers)
        try:
            projects = parse_projects(plugin_config.get("projects"))
        except BridgeError as exc:
            yield _failed(ctx.run_id, str(exc), failure_codes.INVALID_ARGUMENT)
            return
        declared = {"mcp_servers": servers, "projects": projects}

        try:
            relayed = self._relay(ctx, (binary, limits), data_dir, context, env, harness_path, declared, turn_over)
            async with aclosing(relayed) as results:
                async for result in results:
                    yield result
        except (BridgeError, OSError, ValueError, asyncio.TimeoutError) as exc:
            # The run still ends with one terminal result the host can show.
            why = f"harness-bridge failed: {type(exc).__name__}: {exc}"
            yield _failed(ctx.run_id, why, failure_codes.HARNESS_ERROR)

    async def _relay(self, ctx, binary, data_dir, context, env, harness_path, declared, turn_over):
        """The run's turns on the bridge: its own, then each follow-up the
        person sent that no running turn took (in the order sent), each as
        the next turn of the same session. One terminal result ends it all."""
        steering = self.steering and can_pull_steering(ctx)
        waiting: list[Any] = []  # follow-ups pulled that no turn took yet
        turn_context, turns = context, 1
        while True:
            terminal, said = None, None
            async with aclosing(self._turn(ctx, binary, data_dir, turn_context, env, harness_path, declared,
                                           steering, waiting)) as results:
                async for result in results:
                    if result.get("type") in TERMINAL:
                        terminal = result
                        continue
                    if result.get("type") == "message.completed":
                        said = message_text((result.get("data") or {}).get("message"))
                    yield result
            if terminal is None:
                return
            if not waiting:
                yield terminal
                return
            end = terminal.get("data") or {}
            if terminal.get("type") == "run.failed" and end.get("code") in ENDS_THE_RUN:
                # Stopped (a `/stop`, the host) or out of the run's time:
                # the follow-ups do not run; the record names them.
                texts = "; ".join(repr(item.input.to_text()[:80]) for item in waiting)
                yield _log(ctx.run_id, f"{len(waiting)} follow-up(s) not run after the turn ended: {texts}", "warning")
                yield terminal
                return
            if terminal.get("type") == "run.failed":
                # The failed turn is told in words, as the run's answers
                # are, and the person's follow-ups still run.
                sentence = failure_sentence(self.label or self.harness, end)
                yield _log(ctx.run_id, f"a turn failed ({end.get('code')}); the follow-ups still run", "warning")
                yield {"run_id": ctx.run_id, "type": "message.completed",
                       "data": {"message": {"role": "assistant", "content": sentence}}}
            message = end.get("message") if terminal.get("type") == "run.completed" else None
            if isinstance(message, dict) and message_text(message) not in ("", said):
                # The turn's last words, when run.completed alone carries them.
                yield {"run_id": ctx.run_id, "type": "message.completed", "data": {"message": message}}
            turn_over()
            item = waiting.pop(0)
            turns += 1
            turn_id = f"{ctx.run_id}.{turns}"
            turn_context = follow_up_context(context, item, turn_id)
            yield _log(ctx.run_id, f"a follow-up sent during the turn runs as its next turn ({turn_id})")

    async def _pull(self, ctx) -> list[Any]:
        """The follow-ups LangBot has claimed for this run, in order."""
        try:
            pulled = await ctx.api.steering_pull(mode="all")
        except Exception as exc:  # noqa: BLE001 - the turn goes on; the next pull may work
            log.warning("steering_pull failed: %s", exc)
            return []
        return list(pulled.items)

    async def _steer(self, ctx, run_id: str, waiting: list[Any], stop: asyncio.Event) -> None:
        """While the turn runs: pull the person's follow-ups and hand each to
        it; one it does not take waits for a turn of its own, and so does
        every one after it (their order is kept). Stopped by `stop`, after a
        last pull: never cancelled, so nothing pulled is dropped midway."""
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), STEERING_INTERVAL)
            except asyncio.TimeoutError:
                pass
            for item in await self._pull(ctx):
                text = item.input.to_text()
                actor = item.actor.actor_id if item.actor else None
                # Behind a waiting follow-up only a chat command goes in
                # (the bridge answers it at once); the rest keeps its order.
                if text.strip() and await RELAY.steer(run_id, text, actor, only_command=bool(waiting)):
                    continue
                waiting.append(item)

    async def _turn(self, ctx, bridge, data_dir, context, env, harness_path, declared, steering, waiting):
        streamed = ""
        binary, limits = bridge
        relayed = RELAY.run(
            binary=binary,
            limits=limits,
            data_dir=data_dir,
            run_id=context["run_id"],
            harness=self.harness,
            context=context,
            env=env,
            harness_binary=harness_path,
            api=ctx.api,
            declared=declared,
        )
        stop = asyncio.Event()
        pulling = asyncio.create_task(self._steer(ctx, context["run_id"], waiting, stop)) if steering else None
        try:
            # Closed with the run (a cancel): the bridge then stops the harness.
            async with aclosing(relayed) as results:
                async for result in results:
                    kind = result.get("type")
                    data = result.get("data") or {}
                    if kind == "message.delta":
                        # LangBot reads `content` as the text so far unless
                        # `all_content` carries it: send both.
                        chunk = data.get("chunk") or {}
                        piece = chunk.get("content")
                        streamed += piece if isinstance(piece, str) else ""
                        chunk["all_content"] = streamed
                    elif kind == "message.completed":
                        streamed = ""
                    elif kind == "run.completed":
                        message = data.get("message") or {}
                        notice = ((message.get("metadata") or {}).get("session") or {}).get("notice")
                        if notice:
                            yield _log(ctx.run_id, notice)
                    yield result
        finally:
            if pulling is not None:
                stop.set()
                await pulling
