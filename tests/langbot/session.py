#!/usr/bin/env python3
"""One real LangBot (4.11.2) for a whole test binary, driven over stdio.

Started once by the first test that needs it: a fresh LangBot home, LangBot
started headless on 127.0.0.1 (`real_langbot.LangBot`), the plugin package
installed over HTTP and its settings set. It then prints
`{"ready": {...}}` and answers commands, one JSON object per line on stdin,
with one line on stdout: `{"ok": ...}` or `{"error": "..."}`. Progress goes
to stderr. When stdin closes (the test binary exited, however it ended),
LangBot is stopped with everything it started, and the --remove folder (the
test's scratch folder) removed.

Commands:
  {"cmd": "agent", "model_url", "bash"?, "project"?} -> {"uuid"}  an Agent running our Claude Code runner
                                              (`project`: the runner form's Project)
  {"cmd": "pipeline", "model_url", "bash"?}  -> {"uuid"}  a Pipeline running it
                                                (`bash`: its Bash tool runs unasked)
  {"cmd": "codex", "target_type", "model_url", "codex_home", "approvals"?} -> {"uuid"}
        an Agent or Pipeline running our Codex runner, Codex configured by
        the CODEX_HOME folder `codex_home` (`approvals`: it asks in the chat)
  {"cmd": "bot", "target_type", "target_uuid", "adapter"?} -> {"uuid"}
        an enabled bot bound to the target, with its fake other end:
        `onebot` (default): a OneBot v11 bot (reverse WebSocket) and a fake
        IM client (`fake_onebot.py`) connected to it; `http`: an HTTP bot
        (LangBot's streaming webhook adapter) and a fake backend
        (`fake_http_backend.py`)
  {"cmd": "message", "bot", "user_id", "text", "group_id"?, "card"?, "mention"?}
        -> {"sends", "actions", "runs"}
        a person's private message through the bot's client; waits until the
        bot's agent run for it has ended and the chat has been quiet for
        `quiet` seconds (default 3; up to 30 s after the run's end for a
        first message), then returns the messages LangBot put in the chat
        (`sends`, each with its `text`), every action or callback it made,
        and the bot's runs since the message with their results.
        With `group_id`: a message from member `user_id` in that group
        (`card`: their group card, the name LangBot gives them; `mention`,
        default true: it starts by mentioning the bot, as "@bot ...")
  {"cmd": "send", "bot", "user_id", "text", "group_id"?, "card"?, "mention"?}
        -> {"before", "seen"}  the message sent, not waited for (`message`'s
        `since` takes this answer)
  {"cmd": "debug", "agent", "text", "conversation_id"} -> {"items"}
        one turn in the Agent's debug chat (the streamed frames)
  {"cmd": "restart"}                          -> {"seconds", "left"}
        LangBot stopped (`left`: its processes still alive after the stop)
        and started again; the clients reconnect
  {"cmd": "state", "conversation_id"}         -> {"entries", "rows", "transcript"}
  {"cmd": "lookup", "passages"}               -> {"kb_uuid", "engine"}
        the test plugin `lookup_plugin` installed (a knowledge engine with
        no embedding model, a `weather` tool) and a knowledge base of
        `passages` (one per line) on its engine
  {"cmd": "agent_with", "model_url", "config"} -> {"uuid"}  `agent` with more runner settings
        (e.g. {"approvals": "chat", "approvers": "10023,10024"}: the form's
        Approvals and Approvers)
  {"cmd": "pipeline_with", "model_url", "config"} -> {"uuid"}  `pipeline` with more runner settings
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import signal
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from fake_http_backend import FakeHttpBackend  # noqa: E402
from fake_onebot import FakeOneBot  # noqa: E402
from real_langbot import (  # noqa: E402
    TERMINAL,
    Failure,
    LangBot,
    check_package,
    last_run_id,
    log,
    read_db,
    runs_after,
)


class Session:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.home = os.path.abspath(args.home)
        self.lb = LangBot(self.home, sys.executable)
        self.clients: dict[str, FakeOneBot | FakeHttpBackend] = {}
        self.next_self_id = 20000

    async def start(self) -> dict:
        args = self.args
        for path in (args.lbpkg, args.claude, args.codex):
            if not os.path.exists(path):
                raise Failure(f"not found: {path}")
        check_package(args.lbpkg)
        os.makedirs(self.home, exist_ok=True)
        t0 = time.monotonic()
        await asyncio.to_thread(self.lb.write_config)
        await asyncio.to_thread(self.lb.start)
        if args.install_command:
            await asyncio.to_thread(self.lb.install_by_command, args.install_command, args.checkout)
        else:
            await asyncio.to_thread(self.lb.install, os.path.abspath(args.lbpkg))
        await asyncio.to_thread(self.lb.wait_plugin)
        settings = dict(kv.split("=", 1) for kv in args.plugin_config)
        if settings:
            await asyncio.to_thread(self.lb.set_plugin_config, settings)
            await asyncio.to_thread(self.lb.wait_plugin)
        return {"seconds": round(time.monotonic() - t0, 1), "home": self.home}

    def runner_config(self, model_url: str, bash: bool = False, approvals: bool = False) -> dict:
        """The runner's settings; with `bash`, Claude Code may run its Bash
        tool without asking (as root: bypassPermissions with IS_SANDBOX)."""
        claude_home = os.path.join(self.home, "claude-home")
        os.makedirs(os.path.join(claude_home, ".claude"), exist_ok=True)
        config = {
            "harness_path": os.path.abspath(self.args.claude),
            "api_key": "test-key",
            "base_url": model_url,
            "extra_env": f"HOME={claude_home}\nCLAUDE_CONFIG_DIR={claude_home}/.claude\nCLAUDE_CODE_MAX_RETRIES=0",
            "timeout": self.args.timeout,
        }
        if approvals:
            # What Claude Code would ask about goes to the person.
            config["approvals"] = "chat"
        elif bash:
            config["permission_mode"] = "bypassPermissions"
            config["extra_env"] += "\nIS_SANDBOX=1"
        return config

    async def cmd_agent(self, model_url: str, bash: bool = False, approvals: bool = False,
                        project: str | None = None) -> dict:
        config = self.runner_config(model_url, bash, approvals)
        if project:
            config["project"] = project
        return {"uuid": await asyncio.to_thread(self.lb.create_agent, config)}

    async def cmd_pipeline(self, model_url: str, bash: bool = False, approvals: bool = False) -> dict:
        config = self.runner_config(model_url, bash, approvals)
        return {"uuid": await asyncio.to_thread(self.lb.create_pipeline, config)}

    async def cmd_codex(self, target_type: str, model_url: str, codex_home: str, approvals: bool = False) -> dict:
        """Our Codex runner, configured as an operator would: the binary's
        path, a key, and a CODEX_HOME whose config.toml names the model."""
        config = {
            "harness_path": os.path.abspath(self.args.codex),
            "api_key": "test-key",
            "extra_env": f"HOME={codex_home}\nCODEX_HOME={codex_home}",
            "timeout": self.args.timeout,
        }
        if approvals:
            config["approvals"] = "chat"
        create = self.lb.create_agent if target_type == "agent" else self.lb.create_pipeline
        return {"uuid": await asyncio.to_thread(create, config, "codex")}

    async def cmd_send(self, bot: str, user_id: int, text: str, group_id: int | None = None,
                       card: str = "", mention: bool = True) -> dict:
        client = self.clients[bot]
        before = await asyncio.to_thread(last_run_id, self.home)
        seen = len(client.actions)
        await self._post(client, user_id, text, group_id, card, mention)
        return {"before": before, "seen": seen}

    @staticmethod
    async def _post(client: FakeOneBot | FakeHttpBackend, user_id: int, text: str, group_id: int | None,
                    card: str, mention: bool) -> None:
        """A person's message: private, or a member's in group `group_id`."""
        if group_id is None:
            await client.send_private(user_id, text)
        elif isinstance(client, FakeOneBot):
            await client.send_group(group_id, user_id, text, card=card, mention=mention)
        else:
            raise Failure("group messages are sent through a OneBot bot")

    async def cmd_bot(self, target_type: str, target_uuid: str, adapter: str = "onebot") -> dict:
        token = secrets.token_urlsafe(16)
        if adapter == "http":
            backend = FakeHttpBackend(token)
            callback = await backend.listen()
            bot = await asyncio.to_thread(self.lb.create_http_bot, target_type, target_uuid, token, callback)
            backend.webhook = self.lb.webhook_url(bot)
            self.clients[bot] = backend
        else:
            bot = await asyncio.to_thread(self.lb.create_onebot, target_type, target_uuid, token)
            self.next_self_id += 1
            client = FakeOneBot(self.lb.onebot_url(bot), token, str(self.next_self_id))
            await client.connect()
            self.clients[bot] = client
        log(f"{adapter} bot {bot} bound to {target_type} {target_uuid}")
        return {"uuid": bot}

    async def cmd_message(self, bot: str, user_id: int, text: str, quiet: float = 3, timeout: float = 300,
                          since: dict | None = None, group_id: int | None = None, card: str = "",
                          mention: bool = True) -> dict:
        client = self.clients[bot]
        before = await asyncio.to_thread(last_run_id, self.home)
        seen = len(client.actions)
        if since is not None:
            before, seen = since["before"], since["seen"]
        await self._post(client, user_id, text, group_id, card, mention)
        deadline = time.monotonic() + timeout
        ended_at = None
        while True:
            runs = await asyncio.to_thread(runs_after, self.home, bot, before)
            if ended_at is None and runs and all(r["status"] in TERMINAL for r in runs):
                ended_at = time.monotonic()
            sends = client.sends(seen)
            now = time.monotonic()
            if ended_at is not None:
                last = max([a["at"] for a in client.actions[seen:]], default=0)
                if sends and time.time() - last >= quiet:
                    break
                if not sends and now - ended_at >= 30:
                    break
            if now > deadline:
                raise Failure(f"no end to the turn within {timeout:.0f} s: runs {json.dumps(runs)[:1500]}")
            client.changed.clear()
            try:
                await asyncio.wait_for(client.changed.wait(), timeout=0.5)
            except asyncio.TimeoutError:
                pass
        runs = await asyncio.to_thread(runs_after, self.home, bot, before)
        return {"sends": sends, "actions": client.actions[seen:], "runs": runs}

    async def cmd_debug(self, agent: str, text: str, conversation_id: str) -> dict:
        return {"items": await asyncio.to_thread(self.lb.debug_turn, agent, text, conversation_id)}

    async def cmd_restart(self) -> dict:
        t0 = time.monotonic()
        # OneBot clients connect to LangBot; HTTP backends are called by it.
        onebots = [c for c in self.clients.values() if isinstance(c, FakeOneBot)]
        for client in onebots:
            await client.close()
        left = await asyncio.to_thread(self.lb.stop)
        await asyncio.to_thread(self.lb.start)
        await asyncio.to_thread(self.lb.wait_plugin)
        for client in onebots:
            await client.connect()
        return {"seconds": round(time.monotonic() - t0, 1), "left": left}

    async def cmd_plugin_config(self, values: dict) -> dict:
        """Change the plugin's settings as the web UI does (the plugin is
        restarted with them)."""
        await asyncio.to_thread(self.lb.set_plugin_config, values)
        await asyncio.to_thread(self.lb.wait_plugin)
        return {"set": sorted(values)}

    async def cmd_state(self, conversation_id: str) -> dict:
        entries, rows, items = await asyncio.to_thread(read_db, self.home, conversation_id)
        return {"entries": entries, "rows": rows, "transcript": items}

    async def cmd_lookup(self, passages: str) -> dict:
        """The test plugin `tests/langbot/lookup_plugin` installed (a knowledge
        engine that needs no embedding model, and a `weather` tool), and a
        knowledge base of `passages` (one per line) on its engine."""
        return await asyncio.to_thread(self._lookup, passages)

    def _lookup(self, passages: str) -> dict:
        import subprocess

        source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lookup_plugin")
        build = os.path.join(self.home, "lookup-build")
        shutil.copytree(source, build, dirs_exist_ok=True)
        out = os.path.join(self.home, "lookup-pkg")
        subprocess.run([sys.executable, "-m", "langbot_plugin.cli.__init__", "build", "-o", out],
                       cwd=build, check=True, stdout=sys.stderr, stderr=sys.stderr)
        package = [os.path.join(out, f) for f in os.listdir(out) if f.endswith(".lbpkg")][0]
        self.lb.install(package)
        deadline = time.monotonic() + 120
        engine = None
        while engine is None:
            engines = self.lb.api("GET", "/knowledge/engines").get("engines") or []
            engine = next((e for e in engines if "lookup" in str(e.get("plugin_id"))), None)
            if engine is None:
                if time.monotonic() > deadline:
                    raise Failure(f"the lookup engine was not listed: {json.dumps(engines)[:1000]}")
                time.sleep(1)
        kb = self.lb.api("POST", "/knowledge/bases", {
            "name": "handbook", "description": "test handbook",
            "knowledge_engine_plugin_id": engine["plugin_id"],
            "creation_settings": {"passages": passages}, "retrieval_settings": {},
        })
        log(f"knowledge base {kb['uuid']} on {engine['plugin_id']}")
        return {"kb_uuid": kb["uuid"], "engine": engine["plugin_id"]}

    async def cmd_agent_with(self, model_url: str, config: dict) -> dict:
        """An Agent running our Claude Code runner with `config` over the
        usual runner settings (e.g. `knowledge_bases`)."""
        runner_config = {**self.runner_config(model_url), **config}
        return {"uuid": await asyncio.to_thread(self.lb.create_agent, runner_config)}

    async def cmd_pipeline_with(self, model_url: str, config: dict) -> dict:
        """`agent_with`, as a Pipeline."""
        runner_config = {**self.runner_config(model_url), **config}
        return {"uuid": await asyncio.to_thread(self.lb.create_pipeline, runner_config)}

    async def stop(self) -> None:
        for client in self.clients.values():
            try:
                await client.close()
            except Exception:  # noqa: BLE001 - stopping anyway
                pass
        await asyncio.to_thread(self.lb.stop)
        self.lb.cleanup()
        if self.args.remove:
            shutil.rmtree(self.args.remove, ignore_errors=True)


def reply(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj, ensure_ascii=False, default=str) + "\n")
    sys.stdout.flush()


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--home", required=True, help="LangBot home folder (fresh)")
    ap.add_argument("--lbpkg", required=True, help="harness-bridge plugin package")
    ap.add_argument("--claude", required=True, help="absolute path of the claude CLI")
    ap.add_argument("--codex", required=True, help="absolute path of the codex CLI")
    ap.add_argument("--plugin-config", action="append", default=[], metavar="KEY=VALUE",
                    help="a harness-bridge plugin setting (bridge_path, workspace_root); repeatable")
    ap.add_argument("--timeout", type=int, default=120, help="runner turn timeout (s)")
    ap.add_argument("--install-command", help="install the package with this shell command "
                    "(the README's, with $KEY and LANGBOT:5300 filled in), run in --checkout")
    ap.add_argument("--checkout", default=".", help="where --install-command runs")
    ap.add_argument("--remove", metavar="DIR", help="a folder to remove when done (the home's parent, say)")
    args = ap.parse_args()
    if any("=" not in kv for kv in args.plugin_config):
        reply({"error": "--plugin-config takes KEY=VALUE"})
        return 1

    loop = asyncio.get_running_loop()
    stdin = asyncio.StreamReader(limit=16 * 1024 * 1024)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    # A signal ends the session as the end of stdin does: LangBot is stopped.
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stdin.feed_eof)
    session = Session(args)
    try:
        try:
            reply({"ready": await session.start()})
        except Exception as exc:  # noqa: BLE001 - the test reads why
            reply({"error": f"LangBot did not start: {exc}"})
            return 1
        while True:
            line = await stdin.readline()
            if not line:
                return 0
            try:
                command = json.loads(line)
                name = command.pop("cmd")
                handler = getattr(session, f"cmd_{name}")
                reply({"ok": await handler(**command)})
            except Exception as exc:  # noqa: BLE001 - one command failed, the session goes on
                log(traceback.format_exc())
                reply({"error": f"{type(exc).__name__}: {exc}"})
    finally:
        await session.stop()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
