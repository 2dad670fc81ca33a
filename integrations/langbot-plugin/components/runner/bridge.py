"""The plugin's end of the harness-bridge relay (docs/relay-protocol.md).

One `harness-bridge relay` process serves every run of this plugin: run
frames go in, result frames come out, and the bridge's host calls
(history, events, state, storage, the run's tools and knowledge bases)
are answered here through the run's `ctx.api`, limited to an allow-list. When this process goes away, the
bridge's stdin closes and it stops every harness it started.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import hashlib
import json
import logging
import os
import shutil
import stat
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import yaml

from components.runner import failure_codes

PROTOCOL = "harness-bridge.relay.v1"
CLIENT = "langbot-plugin harness-bridge 0.1.0"
# The host APIs `answer` below can serve; the bridge grants runs no other.
APIS = [
    "history_page", "history_search", "event_get", "event_page", "state", "plugin_storage", "workspace_storage",
    "tool_detail", "tool_call", "knowledge_list", "knowledge_retrieve",
]
PLUGIN_DIR = Path(__file__).resolve().parents[2]
# Compressed: LangBot takes packages up to 10 MiB and stores their files
# as they are, and the bridge is larger than that uncompressed.
BUNDLED = PLUGIN_DIR / "bin" / "harness-bridge.gz"
# An operator's harness specs, put in the package by
# `scripts/build-langbot-plugin --adapters DIR`: the bridge runs them too.
ADAPTERS = PLUGIN_DIR / "adapters"
# A harness needs a PATH; the plugin runtime gives none.
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
LINE_LIMIT = 16 * 1024 * 1024

log = logging.getLogger("harness_bridge_plugin")


_COPIED: Path | None = None


class BridgeError(Exception):
    """The bridge could not be started or spoke out of turn."""


def writable_dir(name: str) -> Path:
    """A folder this plugin may write: next to the runtime's file storage
    folder (the installation's own `data`/`tmp`/`home`), else the temp dir."""
    storage = os.environ.get("LANGBOT_PLUGIN_FILE_STORAGE_DIR")
    base = Path(storage).parent if storage else Path(tempfile.gettempdir()) / "harness-bridge-plugin"
    path = base / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def bridge_binary(configured: str | None) -> Path:
    """The bridge to run: the configured absolute path, else the bundled
    binary unpacked out of the read-only package and made executable."""
    if configured:
        path = Path(configured)
        if not path.is_absolute():
            raise BridgeError(f"bridge_path must be an absolute path, got {configured!r}")
        if not os.access(path, os.X_OK):
            raise BridgeError(f"bridge_path {configured} is not an executable file")
        return path
    if not BUNDLED.is_file():
        raise BridgeError(
            "no harness-bridge binary: this package has none bundled (only linux x86_64 "
            "packages do); set the plugin's bridge_path to an installed harness-bridge"
        )
    global _COPIED
    if _COPIED is not None and _COPIED.exists():
        return _COPIED
    digest = hashlib.sha256(BUNDLED.read_bytes()).hexdigest()[:16]
    target = writable_dir("data") / f"harness-bridge-{digest}"
    if not target.exists():
        # A name of its own, then an atomic rename: two runs starting at
        # once never execute a half-written copy.
        fd, partial = tempfile.mkstemp(dir=target.parent, prefix=".harness-bridge-")
        os.close(fd)
        with gzip.open(BUNDLED, "rb") as packed, open(partial, "wb") as unpacked:
            shutil.copyfileobj(packed, unpacked)
        os.chmod(partial, stat.S_IRWXU)
        os.replace(partial, target)
    _COPIED = target
    return target


# The plugin's settings for each conversation's resource limits, and the
# relay flags they become (empty: the bridge's default; 0: no limit).
LIMIT_FLAGS = {"memory_mb": "--memory-mb", "max_processes": "--max-processes", "cpu_percent": "--cpu-percent"}


def limit_flags(config: dict[str, Any]) -> list[str]:
    """The relay's limit flags from the plugin's settings: a conversation's
    agent cannot take the memory, processes or CPU of the others."""
    flags: list[str] = []
    for key, flag in LIMIT_FLAGS.items():
        value = config.get(key)
        if value is None or (isinstance(value, str) and not value.strip()):
            continue
        try:
            number = int(value)
        except (TypeError, ValueError):
            raise BridgeError(f"{key} must be a whole number, got {value!r}") from None
        if number < 0:
            raise BridgeError(f"{key} must be 0 (no limit) or more, got {number}")
        flags += [flag, str(number)]
    return flags


def budget_flags(config: dict[str, Any], data_dir: Path) -> list[str]:
    """The relay's `--budgets` file from the plugin's `budgets` setting
    (YAML: `budgets:` per actor, conversation or bot, and `prices:`), the
    bridge checking every key when it starts. The file is named by its
    digest, so a changed setting is a new flag and a new bridge."""
    text = config.get("budgets")
    if isinstance(text, dict):
        text = yaml.safe_dump(text, sort_keys=True)
    text = str(text or "")
    if not text.strip():
        return []
    try:
        parsed = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise BridgeError(f"the plugin's `budgets` setting is not YAML: {exc}") from exc
    if not isinstance(parsed, dict):
        raise BridgeError(
            "the plugin's `budgets` setting is a mapping, e.g. "
            "`budgets: {actor: {turns_per_minute: 6, tokens_per_day: 500000}}`"
        )
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / f"budgets-{digest}.yaml"
    if not path.is_file():
        partial = path.with_suffix(".partial")
        partial.write_text(text, encoding="utf-8")
        os.replace(partial, path)
    return ["--budgets", str(path)]


def parse_projects(text: Any) -> dict[str, Any]:
    """The plugin's `projects` setting: YAML naming each repository the
    runners may bind a chat to (`web: {repository: /srv/web}`), as
    bridge.yaml's `projects`; the bridge checks each when a run picks it."""
    if isinstance(text, dict):
        projects = text
    else:
        try:
            projects = yaml.safe_load(str(text or "")) or {}
        except yaml.YAMLError as exc:
            raise BridgeError(f"the plugin's `projects` setting is not YAML: {exc}") from exc
    if not isinstance(projects, dict) or not all(
        isinstance(name, str) and isinstance(spec, dict) for name, spec in projects.items()
    ):
        raise BridgeError(
            "the plugin's `projects` setting names each project with its settings, "
            "e.g. `web: {repository: /srv/web}`"
        )
    return projects


def parse_env(text: Any) -> dict[str, str]:
    """`KEY=VALUE` lines (or a mapping) from the config form."""
    if isinstance(text, dict):
        return {str(k): str(v) for k, v in text.items()}
    env: dict[str, str] = {}
    for line in str(text or "").splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        env[key.strip()] = value.strip()
    return env


def error_of(exc: BaseException) -> dict[str, Any]:
    """A host call's failure as a Protocol v1 error object."""
    inner = getattr(exc, "error", None)
    code = getattr(inner, "code", None)
    if code:
        return {
            "code": str(code),
            "message": str(getattr(inner, "message", exc)),
            "retryable": bool(getattr(inner, "retryable", False)),
        }
    if type(exc).__name__ == "PermissionDeniedError":
        return {"code": "unauthorized", "message": str(exc)}
    return {"code": "runtime_error", "message": f"{type(exc).__name__}: {exc}"}


def dump(value: Any) -> Any:
    """SDK models to plain JSON values."""
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json", exclude_none=True)
    if isinstance(value, list):
        return [dump(v) for v in value]
    return value


async def answer(api: Any, action: str, args: dict[str, Any]) -> Any:
    """Answer one host call through `ctx.api`; only these actions exist."""
    if action == "history_page":
        page = await api.history_page(
            conversation_id=args.get("conversation_id"),
            before_cursor=args.get("before_cursor"),
            after_cursor=args.get("after_cursor"),
            limit=int(args.get("limit") or 50),
            direction=args.get("direction") or "backward",
            include_attachments=bool(args.get("include_artifacts")),
        )
        return dump(page)
    if action == "history_search":
        filters = {"conversation_id": args["conversation_id"]} if args.get("conversation_id") else None
        found = await api.history_search(args.get("query") or "", filters=filters, top_k=int(args.get("top_k") or 10))
        return dump(found)
    if action == "event_get":
        return dump(await api.event_get(args["event_id"]))
    if action == "event_page":
        return dump(
            await api.event_page(
                conversation_id=args.get("conversation_id"),
                event_types=args.get("event_types") or None,
                before_cursor=args.get("before_cursor"),
                limit=int(args.get("limit") or 50),
            )
        )
    if action == "state_get":
        got = await api.state_get(args["scope"], args["key"])
        return got.get("value") if isinstance(got, dict) else got
    if action == "state_set":
        await api.state_set(args["scope"], args["key"], args.get("value"))
        return None
    if action == "state_delete":
        got = await api.state_delete(args["scope"], args["key"])
        return bool(got.get("success", True)) if isinstance(got, dict) else True
    if action == "state_list":
        # The host lists keys only; each value is read with a bounded number
        # of calls in flight, so the entries carry values as documented.
        got = await api.state_list(args["scope"], prefix=args.get("prefix"), limit=int(args.get("limit") or 100))
        keys = [k for k in (got.get("keys", []) if isinstance(got, dict) else []) if isinstance(k, str)]
        gate = asyncio.Semaphore(8)

        async def entry(key: str) -> dict[str, Any]:
            async with gate:
                value = await api.state_get(args["scope"], key)
            return {"key": key, "value": value.get("value") if isinstance(value, dict) else value}

        return list(await asyncio.gather(*(entry(k) for k in keys)))
    if action in ("storage_get", "storage_set", "storage_delete", "storage_keys"):
        area = args.get("area")
        if area not in ("plugin", "workspace"):
            raise ValueError(f"unknown storage area {area!r}")
        if action == "storage_get":
            value = await getattr(api, f"get_{area}_storage")(args["key"])
            return base64.b64encode(value).decode() if value is not None else None
        if action == "storage_set":
            await getattr(api, f"set_{area}_storage")(args["key"], base64.b64decode(args.get("value_base64") or ""))
            return None
        if action == "storage_delete":
            await getattr(api, f"delete_{area}_storage")(args["key"])
            return True
        return list(await getattr(api, f"get_{area}_storage_keys")())
    # The run's tools and knowledge bases: LangBot checks the grant again.
    if action == "get_tool_detail":
        return dump(await api.get_tool_detail(args["tool_name"]))
    if action == "call_tool":
        return dump(await api.call_tool(args["tool_name"], args.get("parameters") or {}))
    if action == "retrieve_knowledge":
        found = await api.retrieve_knowledge(args["kb_id"], args.get("query") or "", top_k=int(args.get("top_k") or 5))
        return dump(found)
    raise LookupError(action)


def run_frame(
    run_id: str,
    harness: str,
    context: dict[str, Any],
    env: dict[str, str],
    harness_binary: str | None = None,
    declared: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The relay's `run` frame: the harness's program, and what the
    operator declared (`mcp_servers`, `projects`), only when there is any
    (the bridge then uses its own)."""
    frame = {"type": "run", "run_id": run_id, "harness": harness, "context": context, "env": env}
    if harness_binary:
        frame["binary"] = harness_binary
    frame.update({key: value for key, value in (declared or {}).items() if value})
    return frame


class Relay:
    """One `harness-bridge relay` process, shared by every run."""

    def __init__(self) -> None:
        self._proc: asyncio.subprocess.Process | None = None
        # run_id -> (the bridge process it runs on, its frame queue)
        self._runs: dict[str, tuple[asyncio.subprocess.Process, asyncio.Queue]] = {}
        self._lock = asyncio.Lock()
        self._reader: asyncio.Task | None = None
        self._key: tuple | None = None
        # steer id -> the future its `steered` answer resolves
        self._steers: dict[int, asyncio.Future] = {}
        self._next_steer = 0

    async def _ensure(self, binary: Path, data_dir: Path, limits: list[str]) -> asyncio.subprocess.Process:
        async with self._lock:
            key = (str(binary), str(data_dir), tuple(limits))
            if self._proc is not None and self._proc.returncode is None and self._key == key:
                return self._proc
            if self._proc is not None and self._proc.returncode is None:
                # The operator changed the bridge, folder or limits: the old bridge
                # ends (and with it the runs still on it).
                self._proc.stdin.close()
            specs = ["--adapters", str(ADAPTERS)] if any(ADAPTERS.glob("*.y*ml")) else []
            proc = await asyncio.create_subprocess_exec(
                str(binary), "--data-dir", str(data_dir), "relay", *specs, *limits,
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=None,
                env={"PATH": DEFAULT_PATH}, limit=LINE_LIMIT,
            )
            try:
                await self._write(proc, {"type": "hello", "protocol": PROTOCOL, "client": CLIENT, "apis": APIS})
                line = await asyncio.wait_for(proc.stdout.readline(), timeout=30)
                hello = json.loads(line or b"{}")
                if not isinstance(hello, dict) or hello.get("type") != "hello":
                    raise BridgeError(f"the bridge refused the relay: {hello}")
            except BaseException:
                if proc.returncode is None:
                    proc.kill()
                raise
            log.info("harness-bridge %s relay up (%s)", hello.get("version"), ", ".join(hello.get("harnesses", [])))
            self._proc, self._key = proc, key
            self._reader = asyncio.create_task(self._read(proc))
            return proc

    @staticmethod
    async def _write(proc: asyncio.subprocess.Process, frame: dict[str, Any]) -> None:
        proc.stdin.write((json.dumps(frame) + "\n").encode())
        await proc.stdin.drain()

    async def _read(self, proc: asyncio.subprocess.Process) -> None:
        try:
            while True:
                try:
                    line = await proc.stdout.readline()
                except ValueError:  # a line over the limit: skip it, go on
                    log.warning("bridge wrote a line over %d bytes; skipped", LINE_LIMIT)
                    continue
                if not line:
                    break
                try:
                    frame = json.loads(line)
                except ValueError:
                    log.warning("bridge wrote a non-frame line: %r", line[:200])
                    continue
                if not isinstance(frame, dict):
                    continue
                kind = frame.get("type")
                entry = self._runs.get(frame.get("run_id"))
                queue = entry[1] if entry and entry[0] is proc else None
                if kind in ("result", "host_call") and queue is not None:
                    # Both go to the run's own task: `ctx.api` works only
                    # inside its invocation (a context variable of that task).
                    queue.put_nowait(frame)
                elif kind == "host_call":
                    reply = {"type": "host_reply", "id": frame.get("id"),
                             "error": {"code": "unauthorized", "message": "the run is not active"}}
                    await self._write(proc, reply)
                elif kind == "steered":
                    waiting = self._steers.pop(frame.get("id"), None)
                    if waiting is not None and not waiting.done():
                        waiting.set_result(bool(frame.get("taken")))
                elif kind == "error":
                    log.warning("bridge: %s", frame.get("message"))
        finally:
            for waiting in self._steers.values():
                if not waiting.done():
                    waiting.set_result(False)
            self._steers.clear()
            # This bridge is gone: its runs end with a failure, and the next
            # run starts a new one.
            if self._proc is proc:
                self._proc = None
            for owner, queue in list(self._runs.values()):
                if owner is proc:
                    queue.put_nowait(None)

    async def _host_call(self, proc: asyncio.subprocess.Process, frame: dict[str, Any], api: Any) -> None:
        reply: dict[str, Any] = {"type": "host_reply", "id": frame.get("id")}
        try:
            reply["data"] = await answer(api, frame.get("action", ""), frame.get("args") or {})
        except LookupError as exc:
            reply["error"] = {"code": "not_found", "message": f"host action {exc} is not available through LangBot"}
        except Exception as exc:  # noqa: BLE001 - every failure goes back as an error reply
            reply["error"] = error_of(exc)
        try:
            await self._write(proc, reply)
        except (ConnectionError, RuntimeError):
            pass

    async def steer(self, run_id: str, text: str, actor: str | None = None, only_command: bool = False) -> bool:
        """Hand a follow-up to the running turn of `run_id`; whether it took
        it. `False` (the harness takes none mid-turn, the turn is over, the
        bridge is gone) leaves it with the caller, to send as a turn. A chat
        command (`/stop`) is the bridge's: it answers it in the run and takes
        it, from `actor`; with `only_command` nothing else is taken."""
        entry = self._runs.get(run_id)
        if entry is None or entry[0].returncode is not None:
            return False
        self._next_steer += 1
        steer_id = self._next_steer
        waiting = asyncio.get_running_loop().create_future()
        self._steers[steer_id] = waiting
        try:
            frame = {"type": "steer", "run_id": run_id, "id": steer_id, "text": text, "only_command": only_command}
            if actor:
                frame["actor"] = actor
            await self._write(entry[0], frame)
            return await asyncio.wait_for(waiting, timeout=30)
        except (ConnectionError, RuntimeError, asyncio.TimeoutError):
            return False
        finally:
            self._steers.pop(steer_id, None)

    async def run(
        self,
        *,
        binary: Path,
        data_dir: Path,
        run_id: str,
        harness: str,
        context: dict[str, Any],
        env: dict[str, str],
        harness_binary: str | None,
        api: Any,
        declared: dict[str, Any] | None = None,
        limits: list[str] | None = None,
    ) -> AsyncIterator[dict[str, Any]]:
        """Start a run; yield its results (dicts) until the terminal one.
        Closing the iterator early cancels the run on the bridge."""
        if run_id in self._runs:
            yield {
                "run_id": run_id, "type": "run.failed",
                "data": {
                    "code": failure_codes.INVALID_ARGUMENT,
                    "error": f"run {run_id} is already running",
                    "retryable": False,
                },
            }
            return
        proc = await self._ensure(binary, data_dir, limits or [])
        queue: asyncio.Queue = asyncio.Queue()
        self._runs[run_id] = (proc, queue)
        if proc.returncode is not None or self._proc is not proc:
            queue.put_nowait(None)
        calls: set[asyncio.Task] = set()
        ended = False
        try:
            await self._write(proc, run_frame(run_id, harness, context, env, harness_binary, declared))
            while True:
                frame = await queue.get()
                if frame is not None and frame.get("type") == "host_call":
                    # Created here, the task runs in this invocation's context.
                    task = asyncio.create_task(self._host_call(proc, frame, api))
                    calls.add(task)
                    task.add_done_callback(calls.discard)
                    continue
                result = frame["result"] if frame is not None else None
                if result is None:
                    ended = True
                    yield {
                        "run_id": run_id, "type": "run.failed",
                        "data": {
                            "code": failure_codes.HARNESS_ERROR,
                            "error": "the harness-bridge process ended unexpectedly",
                            "retryable": True,
                        },
                    }
                    return
                ended = result.get("type") in ("run.completed", "run.failed")
                yield result
                if ended:
                    return
        finally:
            if not ended and proc.returncode is None:
                try:
                    await self._write(proc, {"type": "cancel", "run_id": run_id})
                except (ConnectionError, RuntimeError):
                    pass
            self._runs.pop(run_id, None)
            for task in calls:
                task.cancel()


RELAY = Relay()
