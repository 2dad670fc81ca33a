"""The Runner behind every harness of this plugin: it relays the run to
harness-bridge, turns the bridge's results into RunnerResults the way
LangBot reads them, and hands them to `delivery` for the chat."""

from __future__ import annotations

import asyncio
import time
from contextlib import aclosing
from pathlib import Path
from typing import Any, AsyncGenerator, AsyncIterator

from langbot_plugin.api.definition.components.runner.runner import Runner
from langbot_plugin.api.entities.builtin.runner import RunnerContext, RunnerResult

from components.runner.bridge import (
    DEFAULT_PATH,
    RELAY,
    BridgeError,
    bridge_binary,
    parse_env,
    writable_dir,
)
from components.runner.delivery import Delivery
from components.runner.outbox import Outbox

# Config keys that configure the launch, not the binding: they never reach
# the bridge inside the context (secrets among them). The MCP servers the
# form defines travel as operator configuration in the run frame; the
# context only names them.
LAUNCH_KEYS = ("api_key", "base_url", "extra_env", "harness_path", "mcp_servers")
#: Seconds the harness stops before the run's deadline (see harness_deadline).
DEADLINE_MARGIN = 10.0


def _log(run_id: str, text: str, level: str = "info") -> dict[str, Any]:
    return {"run_id": run_id, "type": "processor.log", "data": {"text": text, "level": level}}


def _failed(run_id: str, error: str, code: str) -> dict[str, Any]:
    return {"run_id": run_id, "type": "run.failed", "data": {"error": error, "code": code, "retryable": False}}


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
    #: Variables the form's API key and base URL become.
    key_var = ""
    url_var = ""

    def launch(self, config: dict[str, Any]) -> tuple[dict[str, str], str | None]:
        """The harness's environment and program from the form's values."""
        env = parse_env(config.get("extra_env"))
        if config.get("api_key"):
            env[self.key_var] = str(config["api_key"])
        if config.get("base_url"):
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
        async with aclosing(delivery.shape(self._results(ctx))) as results:
            async for result in results:
                # LangBot numbers what a runner yields: the bridge's numbers
                # would collide with the results `ctx.api` adds (its replies).
                result.pop("sequence", None)
                result["run_id"] = ctx.run_id
                yield RunnerResult.model_validate(result)

    async def _results(self, ctx: RunnerContext) -> AsyncIterator[dict[str, Any]]:
        """The run's results from the bridge, as LangBot reads them; every
        way it can end is one terminal result."""
        config = dict(ctx.config or {})
        env, harness_path = self.launch(config)
        plugin_config = self.get_plugin_config()
        try:
            binary = bridge_binary(str(plugin_config.get("bridge_path") or "").strip() or None)
        except (BridgeError, OSError) as exc:
            yield _failed(ctx.run_id, str(exc), "harness_not_found")
            return
        root = str(plugin_config.get("workspace_root") or "").strip()
        if root and not Path(root).is_absolute():
            # Relative to the plugin runtime's working folder, which the
            # operator neither sees nor chooses: refused, as bridge_path is.
            yield _failed(ctx.run_id, f"workspace_root must be an absolute path, got {root!r}", "workspace_error")
            return
        data_dir = Path(root) if root else writable_dir("data") / "harness-bridge"
        context = ctx.model_dump(mode="json", exclude_none=True)
        context["config"] = {k: v for k, v in config.items() if k not in LAUNCH_KEYS}
        deadline = harness_deadline(ctx.runtime.deadline_at, time.time())
        if deadline is not None:
            context.setdefault("runtime", {})["deadline_at"] = deadline
        servers = config.get("mcp_servers")
        servers = servers if isinstance(servers, dict) else {}
        if servers:
            context["config"]["mcp_servers"] = sorted(servers)

        try:
            relayed = self._relay(ctx, binary, data_dir, context, env, harness_path, servers)
            async with aclosing(relayed) as results:
                async for result in results:
                    yield result
        except (BridgeError, OSError, ValueError, asyncio.TimeoutError) as exc:
            # The run still ends with one terminal result the host can show.
            yield _failed(ctx.run_id, f"harness-bridge failed: {type(exc).__name__}: {exc}", "harness_error")

    async def _relay(self, ctx, binary, data_dir, context, env, harness_path, servers):
        streamed = ""
        relayed = RELAY.run(
            binary=binary,
            data_dir=data_dir,
            run_id=ctx.run_id,
            harness=self.harness,
            context=context,
            env=env,
            harness_binary=harness_path,
            api=ctx.api,
            mcp_servers=servers,
        )
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
