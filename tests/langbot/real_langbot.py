#!/usr/bin/env python3
"""A real, headless LangBot (4.11.2) for the integration tests.

Standard library only (python3.11), imported by `session.py`:

- `LangBot` prepares a fresh home (data/config.yaml from LangBot's own
  template, the API on 127.0.0.1:<free port>, a random global API key, a free
  plugin-debug port), starts LangBot with the stdio plugin runtime forced and
  every server bound to 127.0.0.1 (its output in <home>/langbot.log), stops
  it with every process it started, and drives its HTTP API as an operator
  would: install a plugin package, set the plugin's settings, create Agents,
  Pipelines and bots, talk to an Agent's debug chat;
- `read_db` reads what LangBot 4.11.2 has no HTTP endpoint for (a runner's
  conversation state, the transcript, the agent runs and their results) from
  <home>/data/langbot.db.

The package is checked against LangBot 4.11.2's upload limits first (10 MiB
HTTP body, 16 MiB per file), and a failed install task's exception is written
to langbot.log (an API-key caller only gets "Task execution failed").
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid

PLUGIN = "langbot/harness-bridge"
RUNNER_ID = "plugin:langbot/harness-bridge/claude-code"


def runner_id(runner: str = "claude-code") -> str:
    """The id LangBot gives one of the plugin's runners."""
    return f"plugin:langbot/harness-bridge/{runner}"
# LangBot runs under the python that runs this script (the test venv).
DEFAULT_PYTHON = sys.executable
# LangBot 4.11.2's limits on a plugin package (a package over them fails to
# install with nothing but "Task execution failed" for an API-key caller):
MAX_UPLOAD = 10 * 1024 * 1024  # HTTP body: langbot.pkg.api.http.controller.group.MAX_FILE_SIZE
MAX_ENTRY = 16 * 1024 * 1024  # one file, uncompressed: langbot.pkg.plugin.archive, langbot_plugin...artifact
MAX_TOTAL = 64 * 1024 * 1024  # all files, uncompressed

# Imported by every Python process LangBot starts (PYTHONPATH): no server may
# listen on a wildcard address.
SITECUSTOMIZE = r'''
import importlib.machinery
import sys

_WS_MODULE = "langbot_plugin.runtime.io.controllers.ws.server"
_WILDCARD = (None, "", "0.0.0.0", "::")


def _patch_asyncio():
    import asyncio.base_events as base_events

    original = base_events.BaseEventLoop.create_server

    async def create_server(self, protocol_factory, host=None, port=None, *args, **kwargs):
        if kwargs.get("sock") is None and host in _WILDCARD:
            host = "127.0.0.1"
        return await original(self, protocol_factory, host, port, *args, **kwargs)

    base_events.BaseEventLoop.create_server = create_server


def _patch_ws_server(module):
    cls = module.WebSocketServerController
    original = cls.__init__

    def __init__(self, port, *args, **kwargs):
        kwargs["host"] = "127.0.0.1"
        original(self, port, *args, **kwargs)

    cls.__init__ = __init__


class _PatchOnImport:
    def find_spec(self, name, path=None, target=None):
        if name != _WS_MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def patched_exec(module):
            exec_module(module)
            _patch_ws_server(module)

        spec.loader.exec_module = patched_exec
        return spec


_patch_asyncio()
sys.meta_path.insert(0, _PatchOnImport())
'''

# Runs LangBot with the stdio plugin runtime (this machine has /.dockerenv),
# the runtime's debug port and the Box relay port taken from the environment.
LAUNCHER = r'''
import os
import sys

import langbot.pkg.utils.platform as lb_platform

lb_platform.get_platform = lambda: "linux"

import langbot.pkg.box.connector as box_connector

box_connector._DEFAULT_PORT = int(os.environ["REAL_LANGBOT_BOX_PORT"])

from langbot_plugin.runtime.io.controllers.stdio import client as stdio_client

_original_init = stdio_client.StdioClientController.__init__


def _init(self, *args, **kwargs):
    argv = list(kwargs.get("args") or [])
    if argv[:3] == ["-m", "langbot_plugin.cli.__init__", "rt"] and "--ws-debug-port" not in argv:
        argv += ["--ws-debug-port", os.environ["REAL_LANGBOT_DEBUG_PORT"]]
    if argv[:3] == ["-m", "langbot_plugin.cli.__init__", "box"] and "--host" not in argv:
        argv += ["--host", "127.0.0.1"]
    if "args" in kwargs:
        kwargs["args"] = argv
    _original_init(self, *args, **kwargs)


stdio_client.StdioClientController.__init__ = _init


# Failed user tasks (e.g. a plugin install) only say "Task execution failed"
# to API-key callers: write their exception to the log.
import traceback

import langbot.pkg.core.app  # noqa: F401  (taskmgr alone is a circular import)
import langbot.pkg.core.taskmgr as taskmgr

_original_task_init = taskmgr.TaskWrapper.__init__


def _task_init(self, *args, **kwargs):
    _original_task_init(self, *args, **kwargs)

    def _report(task, name=self.name):
        if not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            print(f"[real_langbot] task {name!r} failed:", file=sys.stderr)
            traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)

    self.task.add_done_callback(_report)


taskmgr.TaskWrapper.__init__ = _task_init

sys.argv = ["langbot"]
import langbot.__main__

langbot.__main__.main()
'''


class Failure(Exception):
    pass


def log(msg: str) -> None:
    print(f"[real_langbot {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def set_yaml_key(text: str, section: str, key: str, value: str) -> str:
    """Set `key` directly under top-level `section` (simple block YAML)."""
    lines = text.split("\n")
    try:
        start = lines.index(f"{section}:")
    except ValueError:
        raise Failure(f"config.yaml has no top-level section {section!r}")
    indent = None
    for i in range(start + 1, len(lines)):
        line = lines[i]
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if not line.startswith(" "):
            break
        this_indent = len(line) - len(line.lstrip(" "))
        if indent is None:
            indent = this_indent
        if this_indent != indent:
            continue
        if re.match(rf"{re.escape(key)}:(\s|$)", line.strip()):
            lines[i] = " " * indent + f"{key}: {value}"
            return "\n".join(lines)
    raise Failure(f"config.yaml has no {section}.{key}")


def yaml_str(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


class LangBot:
    def __init__(self, home: str, python: str):
        self.home = home
        self.python = python
        self.tmp = tempfile.mkdtemp(prefix="real-langbot-")
        self.api_port = free_port()
        self.debug_port = free_port()
        self.box_port = free_port()
        self.api_key = secrets.token_urlsafe(24)
        self.base = f"http://127.0.0.1:{self.api_port}/api/v1"
        self.proc: subprocess.Popen | None = None
        with open(os.path.join(self.tmp, "sitecustomize.py"), "w") as f:
            f.write(SITECUSTOMIZE)
        self.launcher = os.path.join(self.tmp, "launch_langbot.py")
        with open(self.launcher, "w") as f:
            f.write(LAUNCHER)

    # -- configuration -------------------------------------------------
    def write_config(self) -> None:
        data = os.path.join(self.home, "data")
        os.makedirs(data, exist_ok=True)
        path = os.path.join(data, "config.yaml")
        if os.path.exists(path):
            with open(path) as f:
                text = f.read()
        else:
            # LangBot copies its template on first start and loads it without
            # completion, so writing the template ourselves is equivalent.
            out = subprocess.run(
                [self.python, "-c", "import langbot.pkg.utils.paths as p; "
                 "print(p.get_resource_path('templates/config.yaml'))"],
                capture_output=True, text=True, cwd=self.home, timeout=120,
            )
            template = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""
            if out.returncode != 0 or not os.path.isfile(template):
                raise Failure(f"cannot locate LangBot's config template: {out.stderr.strip()[-500:]}")
            with open(template) as f:
                text = f.read()
        text = set_yaml_key(text, "api", "host", yaml_str("127.0.0.1"))
        text = set_yaml_key(text, "api", "port", str(self.api_port))
        text = set_yaml_key(text, "api", "webhook_prefix", yaml_str(f"http://127.0.0.1:{self.api_port}"))
        text = set_yaml_key(text, "api", "global_api_key", yaml_str(self.api_key))
        text = set_yaml_key(text, "plugin", "display_plugin_debug_url",
                            yaml_str(f"ws://127.0.0.1:{self.debug_port}/plugin/debug/ws"))
        text = set_yaml_key(text, "space", "disable_telemetry", "true")
        with open(path, "w") as f:
            f.write(text)

    # -- process control -----------------------------------------------
    def start(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = self.tmp + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env["PYTHONUNBUFFERED"] = "1"
        # The venv is installed without compiled modules: LangBot compiles
        # what it imports once and keeps it for the next start.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["REAL_LANGBOT_DEBUG_PORT"] = str(self.debug_port)
        env["REAL_LANGBOT_BOX_PORT"] = str(self.box_port)
        env.pop("DOCKER_ENV", None)
        logf = open(os.path.join(self.home, "langbot.log"), "ab")
        try:
            self.proc = subprocess.Popen(
                [self.python, self.launcher], cwd=self.home, env=env,
                stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            logf.close()
        log(f"LangBot pid {self.proc.pid}, API 127.0.0.1:{self.api_port}, "
            f"runtime debug {self.debug_port}, box relay {self.box_port}")
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise Failure(f"LangBot exited with {self.proc.returncode}; see {self.home}/langbot.log")
            try:
                with urllib.request.urlopen(f"{self.base}/system/info", timeout=5) as r:
                    if r.status == 200:
                        log("HTTP API is up")
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)
        raise Failure("LangBot's HTTP API did not answer within 180 s")

    def _descendants(self) -> dict[int, str]:
        """pid -> start time of every live process under LangBot or in its group."""
        if self.proc is None:
            return {}
        root = self.proc.pid
        parent: dict[int, int] = {}
        info: dict[int, tuple[int, str]] = {}
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            pid = int(name)
            parent[pid] = int(fields[1])
            info[pid] = (int(fields[2]), fields[19])  # pgrp, starttime
        found = {}
        for pid in parent:
            p, seen = pid, 0
            while p > 1 and seen < 64:
                if p == root:
                    found[pid] = info[pid][1]
                    break
                p, seen = parent.get(p, 0), seen + 1
            if info[pid][0] == root:
                found[pid] = info[pid][1]
        return found

    @staticmethod
    def _alive(pid: int, start: str) -> bool:
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            return False
        fields = stat[stat.rindex(")") + 2:].split()
        return fields[19] == start and fields[0] != "Z"

    def stop(self) -> list[int]:
        """Stop LangBot and everything it started; returns the processes
        still alive after that (there should be none)."""
        if self.proc is None:
            return []
        procs = self._descendants()
        if self.proc.poll() is None:
            log(f"stopping LangBot (SIGTERM {self.proc.pid})")
            try:
                self.proc.send_signal(signal.SIGTERM)
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                log("LangBot still running after 20 s: SIGKILL")
        # Whatever is left (the group, and children that left the group).
        procs.update(self._descendants())
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for pid, start in procs.items():
            if self._alive(pid, start):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(self._alive(p, s) for p, s in procs.items()):
            time.sleep(0.1)
        left = [p for p, s in procs.items() if self._alive(p, s)]
        if left:
            log(f"processes still alive after stop: {left}")
        self.proc = None
        return left

    def cleanup(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- HTTP ----------------------------------------------------------
    def request(self, method: str, path: str, body=None, headers=None, timeout=60):
        hdrs = {"X-API-Key": self.api_key}
        data = None
        if isinstance(body, (bytes, bytearray)):
            data = bytes(body)
        elif body is not None:
            data = json.dumps(body).encode()
            hdrs["Content-Type"] = "application/json"
        hdrs.update(headers or {})
        req = urllib.request.Request(f"{self.base}{path}", data=data, headers=hdrs, method=method)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                raw = r.read()
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                return e.code, json.loads(raw)
            except ValueError:
                return e.code, {"raw": raw.decode("utf-8", "replace")[:2000]}
        try:
            return 200, json.loads(raw)
        except ValueError:
            return 200, {"raw": raw.decode("utf-8", "replace")[:2000]}

    def api(self, method: str, path: str, body=None, **kw):
        status, doc = self.request(method, path, body, **kw)
        if status != 200 or not isinstance(doc, dict) or doc.get("code") != 0:
            raise Failure(f"{method} {path} -> HTTP {status}: {json.dumps(doc)[:1500]}")
        return doc.get("data")

    def last_task_error(self) -> str:
        """The exception line of the last failed task the launcher logged."""
        try:
            with open(os.path.join(self.home, "langbot.log"), errors="replace") as f:
                lines = f.read().splitlines()
        except OSError:
            return ""
        for i in range(len(lines) - 1, -1, -1):
            if lines[i].startswith("[real_langbot] task "):
                for line in lines[i + 1:]:
                    if line and not line.startswith((" ", "Traceback")):
                        return line.strip()
        return ""

    def wait_runtime(self, timeout: float = 240) -> None:
        """Until the plugin runtime is connected (GET /plugins/debug-info asks it)."""
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise Failure(f"LangBot exited with {self.proc.returncode}; see {self.home}/langbot.log")
            try:
                status, doc = self.request("GET", "/plugins/debug-info")
                if status == 200 and doc.get("code") == 0:
                    log("plugin runtime is connected")
                    return
                last = f"HTTP {status}: {json.dumps(doc)[:300]}"
            except (urllib.error.URLError, OSError) as e:
                last = str(e)
            time.sleep(0.5)
        raise Failure(f"plugin runtime not connected within {timeout:.0f} s ({last})")

    def install(self, lbpkg: str, attempts: int = 2) -> None:
        self.wait_runtime()
        for attempt in range(1, attempts + 1):
            try:
                return self._install(lbpkg)
            except Failure as e:
                if attempt == attempts:
                    raise
                log(f"{e}; retrying in 3 s")
                time.sleep(3)

    def _install(self, lbpkg: str) -> None:
        boundary = "----real-langbot-" + uuid.uuid4().hex
        with open(lbpkg, "rb") as f:
            content = f.read()
        body = (
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; "
            f"filename=\"{os.path.basename(lbpkg)}\"\r\nContent-Type: application/octet-stream\r\n\r\n"
        ).encode() + content + f"\r\n--{boundary}--\r\n".encode()
        data = self.api("POST", "/plugins/install/local", body,
                        headers={"Content-Type": f"multipart/form-data; boundary={boundary}"}, timeout=120)
        self._await_install(data)

    def install_by_command(self, command: str, cwd: str) -> None:
        """Install as a person following the README does: `command` run by
        the shell in `cwd`, with `$KEY` this LangBot's API key and
        `LANGBOT:5300` its address."""
        self.wait_runtime()
        address = urllib.parse.urlsplit(self.base).netloc
        command = command.replace("LANGBOT:5300", address)
        env = dict(os.environ, KEY=self.api_key)
        done = subprocess.run(["sh", "-c", command], cwd=cwd, env=env, capture_output=True, timeout=180)
        out = done.stdout.decode("utf-8", "replace")
        if done.returncode != 0:
            raise Failure(f"{command!r} exited {done.returncode}: {done.stderr.decode('utf-8', 'replace')[:1500]}")
        try:
            answer = json.loads(out)
        except ValueError:
            raise Failure(f"{command!r} printed no JSON: {out[:1500]}") from None
        if answer.get("code") != 0:
            raise Failure(f"{command!r}: LangBot answered {out[:1500]}")
        self._await_install(answer.get("data") or {})

    def _await_install(self, data: dict) -> None:
        task_id = data.get("task_id")
        log(f"install task {task_id}")
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            task = self.api("GET", f"/system/tasks/{task_id}")
            status = task.get("status")
            if status == "succeeded":
                break
            if status in ("failed", "cancelled"):
                raise Failure(f"plugin install {status}: {self.last_task_error() or json.dumps(task)[:1500]}"
                              f" (see {self.home}/langbot.log)")
            time.sleep(1)
        else:
            raise Failure("plugin install did not finish within 600 s")
        log("install task succeeded")

    def wait_plugin(self, timeout: float = 300) -> None:
        """Until langbot/harness-bridge is listed and its runner is offered to Agents."""
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            try:
                status, doc = self.request("GET", "/plugins")
                plugins = (doc.get("data") or {}).get("plugins") or [] if status == 200 else []
                listed = any(plugin_id(p) == PLUGIN for p in plugins)
                if listed:
                    status, doc = self.request("GET", "/agents/_/metadata")
                    if status == 200 and RUNNER_ID in json.dumps(doc):
                        log("plugin and runner are listed")
                        return
                    last = "plugin listed, runner not yet offered"
                else:
                    last = f"plugins: {[plugin_id(p) for p in plugins]} (HTTP {status})"
            except (urllib.error.URLError, OSError) as e:
                last = str(e)
            time.sleep(1)
        raise Failure(f"plugin {PLUGIN} / runner {RUNNER_ID} not listed within {timeout:.0f} s ({last})")

    def set_plugin_config(self, values: dict) -> None:
        author, name = PLUGIN.split("/")
        current = self.api("GET", f"/plugins/{author}/{name}/config").get("config") or {}
        self.api("PUT", f"/plugins/{author}/{name}/config", {**current, **values})
        log(f"plugin config set: {sorted(values)}")

    def create_agent(self, runner_config: dict, runner: str = "claude-code") -> str:
        rid = runner_id(runner)
        body = {
            "name": "harness-bridge e2e",
            "kind": "agent",
            "config": {"runner": {"id": rid}, "runner_config": {rid: runner_config}},
        }
        data = self.api("POST", "/agents", body)
        return data["uuid"]

    def create_pipeline(self, runner_config: dict, runner: str = "claude-code") -> str:
        """A Pipeline whose runner is ours, made as the web UI makes one:
        created with the default config, then its runner set and put back."""
        rid = runner_id(runner)
        uuid_ = self.api("POST", "/pipelines", {"name": "harness-bridge e2e", "description": "", "emoji": "🤖"})["uuid"]
        config = self.api("GET", f"/pipelines/{uuid_}")["pipeline"]["config"]
        config["ai"]["runner"] = {**config["ai"].get("runner", {}), "id": rid}
        config["ai"].setdefault("runner_config", {})[rid] = runner_config
        self.api("PUT", f"/pipelines/{uuid_}", {"config": config})
        return uuid_

    def create_onebot(self, target_type: str, target_uuid: str, token: str) -> str:
        """An enabled OneBot v11 bot (reverse WebSocket) whose messages go
        to `target_type` (agent | pipeline) `target_uuid`."""
        body = {
            "name": f"onebot e2e ({target_type})",
            "description": "",
            "adapter": "onebot-v11",
            "adapter_config": {"connection_mode": "reverse_ws", "access-token": token, "self_id": ""},
            "enable": True,
            "event_bindings": [{
                "event_pattern": "message.received", "target_type": target_type,
                "target_uuid": target_uuid, "filters": [], "priority": 0, "enabled": True,
            }],
        }
        return self.api("POST", "/platform/bots", body)["uuid"]

    def create_http_bot(self, target_type: str, target_uuid: str, secret: str, callback_url: str) -> str:
        """An enabled HTTP bot (LangBot's streaming webhook adapter) whose
        messages go to `target_type` `target_uuid`; replies go to
        `callback_url`, signed with `secret`."""
        body = {
            "name": f"http bot e2e ({target_type})",
            "description": "",
            "adapter": "http_bot",
            "adapter_config": {
                "inbound_secret": secret, "outbound_secret": secret, "callback_url": callback_url,
                "default_session_type": "person", "signature_required": True,
            },
            "enable": True,
            "event_bindings": [{
                "event_pattern": "message.received", "target_type": target_type,
                "target_uuid": target_uuid, "filters": [], "priority": 0, "enabled": True,
            }],
        }
        return self.api("POST", "/platform/bots", body)["uuid"]

    def webhook_url(self, bot: str) -> str:
        return f"http://127.0.0.1:{self.api_port}/bots/{bot}"

    def onebot_url(self, bot: str) -> str:
        return f"ws://127.0.0.1:{self.api_port}/bots/{bot}/onebot/v11/ws"

    def debug_turn(self, agent: str, text: str, conversation_id: str) -> list[dict]:
        """One turn in the Agent's debug chat: the frames it streamed, the
        last one `completed`."""
        req = urllib.request.Request(
            f"{self.base}/agents/{agent}/debug/stream",
            data=json.dumps({"text": text, "conversation_id": conversation_id}).encode(),
            headers={"X-API-Key": self.api_key, "Content-Type": "application/json"},
            method="POST",
        )
        items = []
        try:
            with urllib.request.urlopen(req, timeout=600) as r:
                while True:
                    line = r.readline()
                    if not line:
                        break
                    line = line.strip()
                    if line:  # empty lines keep the connection alive
                        items.append(json.loads(line))
        except urllib.error.HTTPError as e:
            raise Failure(f"debug stream HTTP {e.code}: {e.read()[:1500].decode('utf-8', 'replace')}")
        if not items or items[-1].get("kind") != "completed":
            raise Failure(f"the debug turn did not complete: {json.dumps(items[-1:])[:1500]}")
        return items


def check_package(path: str) -> None:
    import zipfile

    size = os.path.getsize(path)
    problems = []
    if size > MAX_UPLOAD - 64 * 1024:
        problems.append(f"the package is {size} bytes; LangBot refuses HTTP bodies over {MAX_UPLOAD} bytes")
    with zipfile.ZipFile(path) as z:
        infos = z.infolist()
    for info in infos:
        if info.file_size > MAX_ENTRY:
            problems.append(f"{info.filename} is {info.file_size} bytes uncompressed; "
                            f"LangBot refuses package entries over {MAX_ENTRY} bytes")
    # What only develops the plugin stays out of what LangBot installs.
    development = [i.filename for i in infos if i.filename.startswith("tests/") or i.filename == "pyproject.toml"]
    if development:
        raise Failure(f"{path} ships the plugin's own tests and lint set-up: {', '.join(development)}")
    total = sum(i.file_size for i in infos)
    if total > MAX_TOTAL:
        problems.append(f"the package holds {total} bytes uncompressed; LangBot's limit is {MAX_TOTAL}")
    if problems:
        raise Failure(f"{path} cannot be installed in LangBot 4.11.2: " + "; ".join(problems))


def plugin_id(p: dict) -> str:
    for meta in (p.get("manifest", {}).get("manifest", {}).get("metadata"),
                 p.get("manifest", {}).get("metadata"), p.get("metadata"), p):
        if isinstance(meta, dict) and meta.get("author") and meta.get("name"):
            return f"{meta['author']}/{meta['name']}"
    return "?"


def _db(home: str) -> sqlite3.Connection:
    path = os.path.join(home, "data", "langbot.db")
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    con.row_factory = sqlite3.Row
    return con


def _json(value):
    try:
        return json.loads(value) if isinstance(value, str) else value
    except ValueError:
        return value


def read_db(home: str, conversation_id: str):
    """The runner's conversation state (entries and rows) and the transcript."""
    con = _db(home)
    try:
        rows = [dict(r) for r in con.execute(
            "SELECT * FROM runner_state WHERE runner_id = ? ORDER BY id", (RUNNER_ID,))]
        entries = {}
        for r in rows:
            r["value"] = _json(r["value_json"]) if r["value_json"] is not None else None
            if r.get("scope") == "conversation" and (
                    r.get("conversation_id") == conversation_id or conversation_id in (r.get("scope_key") or "")):
                entries[r["state_key"]] = r["value"]
        items = []
        for r in con.execute("SELECT * FROM transcript WHERE conversation_id = ? ORDER BY seq, id",
                             (conversation_id,)):
            item = dict(r)
            for k in ("content_json", "attachment_refs_json"):
                item[k] = _json(item.get(k))
            items.append(item)
        return entries, rows, items
    finally:
        con.close()


#: The statuses an agent run ends in.
TERMINAL = ("completed", "failed", "cancelled", "timeout")


def last_run_id(home: str) -> int:
    con = _db(home)
    try:
        return con.execute("SELECT COALESCE(MAX(id), 0) FROM agent_run").fetchone()[0]
    finally:
        con.close()


def runs_after(home: str, bot: str, after: int) -> list[dict]:
    """The bot's agent runs newer than row `after`, each with its results."""
    con = _db(home)
    try:
        runs = []
        for r in con.execute(
                "SELECT id, run_id, status, status_reason, conversation_id FROM agent_run "
                "WHERE bot_id = ? AND id > ? ORDER BY id", (bot, after)):
            run = dict(r)
            run["results"] = [
                {"sequence": e["sequence"], "type": e["type"], "data": _json(e["data_json"])}
                for e in con.execute(
                    "SELECT sequence, type, data_json FROM agent_run_event WHERE run_id = ? ORDER BY sequence",
                    (run["run_id"],))
            ]
            runs.append(run)
        return runs
    finally:
        con.close()
