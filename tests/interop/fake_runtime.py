"""A stand-in for LangBot's plugin runtime, for the relay tests.

It starts the real plugin worker over stdio the way the runtime does (no
PATH, no HOME, a file-storage folder), registers and initializes it, sends
`run_runner` requests, and answers the worker's host actions from a small
in-memory host: a transcript, conversation state, plugin storage. Like
LangBot, it puts the conversation's state into each run's context. Every
result and host action is printed as one JSON line, for the Rust test to
check.

Usage: python fake_runtime.py SCENARIO.json
SCENARIO: {"plugin_dir", "plugin_config", "transcript": [items],
           "runs": [{"runner_name", "context", "cancel_after"?: seconds}],
           "watch_dir"?: after a cancelled run, report the process groups
           working under it}
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile

LIMIT = 64 * 1024 * 1024


def processes_under(root: str) -> list[str]:
    """Processes whose working directory is under `root`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if cwd == root or cwd.startswith(root.rstrip("/") + "/"):
            found.append(pid)
    return found


def emit(event: str, **fields) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


class Runtime:
    def __init__(self, scenario: dict) -> None:
        self.scenario = scenario
        self.state: dict[str, object] = {}
        self.storage: dict[str, str] = {}
        self.seq = 10_000
        self.waiting: dict[int, asyncio.Queue] = {}

    async def send(self, message: dict) -> None:
        self.proc.stdin.write((json.dumps(message) + "\n").encode())
        await self.proc.stdin.drain()

    async def read_message(self) -> dict | None:
        """One message, joining chunked ones; non-JSON lines (the worker's
        banner) are skipped."""
        while True:
            line = await self.proc.stdout.readline()
            if not line:
                return None
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if message.get("type") != "chunk_start":
                return message
            parts = []
            while True:
                part = json.loads(await self.proc.stdout.readline())
                if part.get("type") == "chunk_end":
                    return json.loads("".join(parts))
                parts.append(part.get("data", ""))

    def host_answer(self, action: str, data: dict) -> object:
        """The host side of the runner proxy actions the plugin uses."""
        if action == "history_page":
            items = self.scenario.get("transcript", [])
            return {"items": items, "has_more": False, "total_count": len(items)}
        if action == "history_search":
            items = [i for i in self.scenario.get("transcript", []) if data.get("query", "") in (i.get("content") or "")]
            return {"items": items, "total_count": len(items), "query": data.get("query")}
        if action == "state_get":
            return {"value": self.state.get(f"{data['scope']}:{data['key']}")}
        if action == "state_set":
            self.state[f"{data['scope']}:{data['key']}"] = data.get("value")
            return {"success": True}
        if action == "state_delete":
            return {"success": self.state.pop(f"{data['scope']}:{data['key']}", None) is not None}
        if action == "state_list":
            prefix = f"{data['scope']}:{data.get('prefix') or ''}"
            return {"keys": [k.split(":", 1)[1] for k in self.state if k.startswith(prefix)], "has_more": False}
        # The host's own tools and knowledge bases, as the scenario has them.
        tool = self.scenario.get("tools", {}).get(data.get("tool_name"))
        if action == "get_tool_detail" and tool is not None:
            return {"tool": {"name": data["tool_name"], "description": tool["description"], "parameters": tool["parameters"]}}
        if action == "call_tool" and tool is not None:
            return {"result": {**tool["result"], "parameters": data.get("parameters")}}
        if action == "retrieve_knowledge_base":
            entries = self.scenario.get("knowledge", {}).get(data.get("kb_id"), [])
            return {"results": entries[: int(data.get("top_k") or 5)]}
        raise LookupError(action)

    async def reader(self) -> None:
        while True:
            message = await self.read_message()
            if message is None:
                break
            if "action" in message:
                action, data = message["action"], message.get("data") or {}
                reply = {"seq_id": message["seq_id"], "code": 0, "message": "", "data": {}, "chunk_status": "end"}
                if action not in ("register_plugin",):
                    emit("host_action", action=action, data=data)
                    try:
                        reply["data"] = self.host_answer(action, data)
                    except LookupError:
                        reply.update(code=1, message=f"the fake host has no {action}")
                await self.send(reply)
                continue
            queue = self.waiting.get(message.get("seq_id"))
            if queue is not None:
                await queue.put(message)
        for queue in self.waiting.values():
            await queue.put(None)

    async def request(self, action: str, data: dict) -> asyncio.Queue:
        self.seq += 1
        queue: asyncio.Queue = asyncio.Queue()
        self.waiting[self.seq] = queue
        await self.send({"seq_id": self.seq, "action": action, "data": data})
        queue.seq_id = self.seq  # type: ignore[attr-defined]
        return queue

    async def main(self) -> int:
        home = tempfile.mkdtemp(prefix="fake-runtime-")
        storage = os.path.join(home, "rpc-transfer")
        os.makedirs(storage)
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "langbot_plugin.cli.__init__", "run", "-s",
            cwd=self.scenario["plugin_dir"],
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=None,
            env={"LANGBOT_PLUGIN_FILE_STORAGE_DIR": storage, "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"},
            limit=LIMIT,
        )
        reader = asyncio.create_task(self.reader())
        init = await self.request(
            "initialize_plugin",
            {"plugin_settings": {"enabled": True, "priority": 0, "plugin_config": self.scenario.get("plugin_config", {})}},
        )
        reply = await asyncio.wait_for(init.get(), timeout=60)
        if not reply or reply.get("code") != 0:
            emit("error", message=f"initialize_plugin failed: {reply}")
            return 1
        for run in self.scenario["runs"]:
            context = run["context"]
            # As LangBot does: the conversation's state rides in the context.
            context.setdefault("state", {})["conversation"] = {
                k.split(":", 1)[1]: v for k, v in self.state.items() if k.startswith("conversation:")
            }
            queue = await self.request("run_runner", {"runner_name": run["runner_name"], "context": context})
            cancel_after = run.get("cancel_after")
            cancel_at = asyncio.get_running_loop().time() + cancel_after if cancel_after else None
            cancelled = False
            while True:
                now = asyncio.get_running_loop().time()
                if cancel_at is not None and not cancelled and now >= cancel_at:
                    # As the runtime does when LangBot cancels a run.
                    cancelled = True
                    self.seq += 1
                    await self.send({"seq_id": self.seq, "action": "__cancel_action", "data": {"seq_id": queue.seq_id}})
                    emit("cancel_sent", run_id=context["run_id"])
                wait = 180.0
                if cancel_at is not None:
                    wait = max(0.05, cancel_at - now) if not cancelled else 10.0
                try:
                    message = await asyncio.wait_for(queue.get(), timeout=wait)
                except asyncio.TimeoutError:
                    if cancelled:
                        break
                    if cancel_at is not None:
                        continue
                    raise
                if message is None:
                    emit("error", message="the worker went away")
                    return 1
                if message.get("code") not in (0, None):
                    emit("run_error", run_id=context["run_id"], message=message.get("message"))
                    break
                data = message.get("data")
                if isinstance(data, dict) and data.get("type"):
                    emit("result", run_id=context["run_id"], result=data)
                if message.get("chunk_status") != "continue":
                    break
            emit("run_end", run_id=context["run_id"])
            watch = self.scenario.get("watch_dir")
            if cancel_at is not None and watch:
                # What works there once the cancel has settled: at most the
                # conversation's live harness, interrupted and kept.
                await asyncio.sleep(1.0)
                groups = set()
                for pid in processes_under(watch):
                    try:
                        groups.add(os.getpgid(int(pid)))
                    except OSError:
                        pass
                emit("processes", run_id=context["run_id"], groups=sorted(groups))
        # The worker keeps trying to reconnect after its stdin closes; the
        # runtime stops it with a signal, and so does this.
        self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), timeout=2)
        except asyncio.TimeoutError:
            self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), timeout=10)
            except asyncio.TimeoutError:
                self.proc.kill()
        reader.cancel()
        emit("done", state=self.state)
        return 0


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        sys.exit(asyncio.run(Runtime(json.load(f)).main()))
