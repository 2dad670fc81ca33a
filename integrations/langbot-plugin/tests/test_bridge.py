"""The plugin's end of the relay: settings into flags, host calls answered,
frames in and out of the bridge process."""

import asyncio
import base64
import json
import stat
from types import SimpleNamespace

import pytest

from components.runner import bridge
from components.runner.bridge import (
    BridgeError,
    Relay,
    answer,
    bridge_binary,
    budget_flags,
    dump,
    error_of,
    limit_flags,
    parse_env,
    parse_projects,
    run_frame,
    writable_dir,
)


def test_limit_settings_become_relay_flags_in_a_fixed_order():
    flags = limit_flags({"cpu_percent": "50", "memory_mb": 2048, "max_processes": 0})
    assert flags == ["--memory-mb", "2048", "--max-processes", "0", "--cpu-percent", "50"]


def test_an_empty_limit_setting_leaves_the_bridges_default():
    assert limit_flags({"memory_mb": None, "max_processes": "  ", "other": 5}) == []


@pytest.mark.parametrize(
    ("value", "said"),
    [("lots", "whole number"), ([1], "whole number"), (-1, r"0 \(no limit\) or more")],
)
def test_a_limit_setting_that_is_no_count_is_refused(value, said):
    with pytest.raises(BridgeError, match=said):
        limit_flags({"memory_mb": value})


def test_the_budgets_setting_becomes_a_file_named_by_its_content(tmp_path):
    text = "budgets:\n  actor: {turns_per_minute: 2}\n"
    flags = budget_flags({"budgets": text}, tmp_path / "data")
    assert flags[0] == "--budgets"
    assert (tmp_path / "data").joinpath(flags[1]).read_text() == text
    again = budget_flags({"budgets": text}, tmp_path / "data")
    assert again == flags, "the same setting is the same flag: the bridge is kept"
    changed = budget_flags({"budgets": text.replace("2", "3")}, tmp_path / "data")
    assert changed != flags, "a changed setting is a new flag: a new bridge reads it"
    assert budget_flags({"budgets": "  "}, tmp_path) == []
    assert budget_flags({}, tmp_path) == []


@pytest.mark.parametrize(("text", "said"), [("budgets: [", "not YAML"), ("- 1\n", "a mapping")])
def test_a_budgets_setting_that_is_no_mapping_is_refused(tmp_path, text, said):
    with pytest.raises(BridgeError, match=said):
        budget_flags({"budgets": text}, tmp_path)


def test_extra_environment_lines_are_parsed():
    text = "# a comment\nPATH=/opt/node/bin:/usr/bin\n\n  KEY = a=b  \nno equals sign\n"
    assert parse_env(text) == {"PATH": "/opt/node/bin:/usr/bin", "KEY": "a=b"}
    assert parse_env(None) == {}
    assert parse_env({"N": 1}) == {"N": "1"}


def test_a_host_failure_keeps_its_protocol_error():
    inner = SimpleNamespace(code="rate_limited", message="slow down", retryable=True)
    failure = Exception("wrapped")
    failure.error = inner
    assert error_of(failure) == {"code": "rate_limited", "message": "slow down", "retryable": True}


def test_a_refused_host_call_is_unauthorized_and_others_are_runtime_errors():
    class PermissionDeniedError(Exception):
        pass

    assert error_of(PermissionDeniedError("no")) == {"code": "unauthorized", "message": "no"}
    assert error_of(KeyError("k")) == {"code": "runtime_error", "message": "KeyError: 'k'"}


def test_dump_turns_models_into_json_values():
    class Model:
        def model_dump(self, **how):
            return {"how": how}

    assert dump([Model(), 3]) == [{"how": {"mode": "json", "exclude_none": True}}, 3]
    assert dump("text") == "text"


def test_the_projects_setting_is_yaml_naming_each_repository():
    text = "web:\n  repository: /srv/web\n  mode: shared\n"
    assert parse_projects(text) == {"web": {"repository": "/srv/web", "mode": "shared"}}
    assert parse_projects("") == {} and parse_projects(None) == {}
    for wrong in ("- /srv/web", "web: /srv/web", "web: [unclosed"):
        with pytest.raises(BridgeError, match="projects"):
            parse_projects(wrong)


def test_the_run_frame_names_a_program_and_servers_only_when_given():
    frame = run_frame("r1", "codex", {"run_id": "r1"}, {"PATH": "/bin"})
    assert frame == {"type": "run", "run_id": "r1", "harness": "codex", "context": {"run_id": "r1"},
                     "env": {"PATH": "/bin"}}
    servers = {"docs": {"url": "http://127.0.0.1:9/mcp"}}
    projects = {"web": {"repository": "/srv/web"}}
    frame = run_frame("r1", "codex", {}, {}, "/opt/codex/bin/codex", {"mcp_servers": servers, "projects": {}})
    assert (frame["binary"], frame["mcp_servers"]) == ("/opt/codex/bin/codex", servers)
    assert "projects" not in frame
    frame = run_frame("r1", "codex", {}, {}, None, {"mcp_servers": {}, "projects": projects})
    assert frame["projects"] == projects and "mcp_servers" not in frame


def test_writable_folders_sit_beside_the_runtimes_storage(tmp_path, monkeypatch):
    monkeypatch.setenv("LANGBOT_PLUGIN_FILE_STORAGE_DIR", str(tmp_path / "storage"))
    assert writable_dir("home") == tmp_path / "home"
    assert (tmp_path / "home").is_dir()


def test_a_configured_bridge_must_be_an_absolute_executable(tmp_path):
    with pytest.raises(BridgeError, match="absolute path"):
        bridge_binary("bin/harness-bridge")
    program = tmp_path / "harness-bridge"
    program.write_text("#!/bin/sh\n")
    with pytest.raises(BridgeError, match="not an executable"):
        bridge_binary(str(program))
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    assert bridge_binary(str(program)) == program


def test_without_a_bundled_bridge_the_operator_is_told_what_to_set(tmp_path, monkeypatch):
    monkeypatch.setattr(bridge, "BUNDLED", tmp_path / "absent.gz")
    with pytest.raises(BridgeError, match="bridge_path"):
        bridge_binary(None)


class FakeApi:
    """The host calls `answer` makes, recorded."""

    def __init__(self):
        self.calls = []
        self.state = {"a": 1, "b": [2]}
        self.storage = {}

    def __getattr__(self, name):
        async def call(*args, **kwargs):
            self.calls.append((name, args, kwargs))
            return {"called": name}

        return call

    async def state_get(self, scope, key):
        return {"value": self.state.get(key)}

    async def state_list(self, scope, prefix=None, limit=100):
        return {"keys": sorted(self.state)[:limit] + [7]}

    async def set_workspace_storage(self, key, value):
        self.storage[key] = value

    async def get_workspace_storage(self, key):
        return self.storage.get(key)


def run(coro):
    """`coro` to its end; one that waits on a frame that never comes fails."""
    return asyncio.run(asyncio.wait_for(coro, timeout=5))


def test_history_page_gets_its_defaults():
    api = FakeApi()
    run(answer(api, "history_page", {"conversation_id": "c", "include_artifacts": 1}))
    (name, _, kwargs), = api.calls
    assert name == "history_page"
    assert (kwargs["limit"], kwargs["direction"], kwargs["include_attachments"]) == (50, "backward", True)


def test_history_search_filters_by_conversation_only_when_named():
    api = FakeApi()
    run(answer(api, "history_search", {"query": "tulip"}))
    run(answer(api, "history_search", {"query": "tulip", "conversation_id": "c", "top_k": "3"}))
    assert [c[2] for c in api.calls] == [
        {"filters": None, "top_k": 10},
        {"filters": {"conversation_id": "c"}, "top_k": 3},
    ]


def test_state_reads_unwrap_the_value_and_a_list_carries_values():
    api = FakeApi()
    assert run(answer(api, "state_get", {"scope": "conversation", "key": "b"})) == [2]
    # A key that is no string is left out.
    assert run(answer(api, "state_list", {"scope": "conversation"})) == [
        {"key": "a", "value": 1},
        {"key": "b", "value": [2]},
    ]


def test_storage_values_travel_as_base64():
    api = FakeApi()
    value = base64.b64encode(b"\0bytes").decode()
    assert run(answer(api, "storage_set", {"area": "workspace", "key": "k", "value_base64": value})) is None
    assert api.storage == {"k": b"\0bytes"}
    assert run(answer(api, "storage_get", {"area": "workspace", "key": "k"})) == value
    assert run(answer(api, "storage_get", {"area": "workspace", "key": "absent"})) is None


def test_an_unknown_storage_area_or_action_is_refused():
    with pytest.raises(ValueError, match="storage area"):
        run(answer(FakeApi(), "storage_get", {"area": "elsewhere", "key": "k"}))
    with pytest.raises(LookupError):
        run(answer(FakeApi(), "shell_exec", {}))


class FakeStdin:
    def __init__(self):
        self.frames = []
        self.closed = False

    def write(self, data):
        self.frames.append(json.loads(data))

    async def drain(self):
        pass

    def close(self):
        self.closed = True


class FakeStdout:
    def __init__(self, lines):
        self.lines = list(lines)

    async def readline(self):
        await asyncio.sleep(0)
        return self.lines.pop(0) if self.lines else b""


class FakeProc:
    def __init__(self, lines=()):
        self.stdin = FakeStdin()
        self.stdout = FakeStdout(lines)
        self.returncode = None


def relay_with(proc):
    relay = Relay()

    async def ensure(binary, data_dir, limits):
        relay._proc = proc
        return proc

    relay._ensure = ensure
    return relay


def start(relay, run_id="r1", **more):
    args = {"binary": "/bin/harness-bridge", "data_dir": "/tmp/d", "run_id": run_id, "harness": "codex",
            "context": {"run_id": run_id}, "env": {}, "harness_binary": None, "api": FakeApi()}
    return relay.run(**{**args, **more})


def result(run_id, kind, **data):
    return {"type": "result", "run_id": run_id, "result": {"run_id": run_id, "type": kind, "data": data}}


@pytest.mark.parametrize("terminal", ["run.completed", "run.failed"])
def test_a_run_yields_the_bridges_results_until_the_terminal_one(terminal):
    async def scenario():
        proc = FakeProc()
        relay = relay_with(proc)
        results = start(relay, harness_binary="/opt/codex")
        first = asyncio.ensure_future(results.__anext__())
        await asyncio.sleep(0)
        queue = relay._runs["r1"][1]
        queue.put_nowait(result("r1", "message.delta", chunk={"content": "hi"}))
        queue.put_nowait(result("r1", terminal))
        queue.put_nowait(result("r1", "message.delta", chunk={"content": "late"}))
        got = [await first] + [r async for r in results]
        return proc, relay, got

    proc, relay, got = run(scenario())
    assert [r["type"] for r in got] == ["message.delta", terminal]
    # Ended by the bridge: nothing to cancel.
    assert proc.stdin.frames == [run_frame("r1", "codex", {"run_id": "r1"}, {}, "/opt/codex")]
    assert relay._runs == {}


def test_a_run_whose_bridge_ends_fails_retryably():
    async def scenario():
        relay = relay_with(FakeProc())
        results = start(relay)
        first = asyncio.ensure_future(results.__anext__())
        await asyncio.sleep(0)
        relay._runs["r1"][1].put_nowait(None)
        return await first

    failed = run(scenario())
    assert failed["type"] == "run.failed"
    assert failed["data"]["code"] == "harness_error"
    assert failed["data"]["retryable"] is True


def test_a_run_closed_before_its_end_is_cancelled_on_the_bridge():
    async def scenario():
        proc = FakeProc()
        relay = relay_with(proc)
        results = start(relay)
        first = asyncio.ensure_future(results.__anext__())
        await asyncio.sleep(0)
        relay._runs["r1"][1].put_nowait(result("r1", "message.delta", chunk={"content": "hi"}))
        await first
        await results.aclose()
        return proc, relay

    proc, relay = run(scenario())
    assert proc.stdin.frames[-1] == {"type": "cancel", "run_id": "r1"}
    assert relay._runs == {}


def test_a_second_run_of_the_same_id_is_refused():
    async def scenario():
        relay = relay_with(FakeProc())
        results = start(relay)
        first = asyncio.ensure_future(results.__anext__())
        await asyncio.sleep(0)
        second = [r async for r in start(relay)]
        first.cancel()
        return second

    (refused,) = run(scenario())
    assert refused["data"]["code"] == "invalid_argument"


def test_the_reader_routes_frames_and_ends_the_runs_of_a_bridge_that_exits():
    async def scenario():
        lines = [
            json.dumps(result("r1", "message.delta")).encode() + b"\n",
            b"not json\n",
            json.dumps({"type": "host_call", "id": 4, "run_id": "gone", "action": "state_get"}).encode() + b"\n",
            json.dumps({"type": "steered", "id": 1, "taken": True}).encode() + b"\n",
        ]
        proc = FakeProc(lines)
        relay = Relay()
        relay._proc = proc
        queue = asyncio.Queue()
        relay._runs["r1"] = (proc, queue)
        steered = asyncio.get_running_loop().create_future()
        relay._steers[1] = steered
        await relay._read(proc)
        return proc, relay, [queue.get_nowait() for _ in range(queue.qsize())], steered.result()

    proc, relay, frames, taken = run(scenario())
    assert frames[0]["result"]["type"] == "message.delta"
    assert frames[1] is None  # the bridge is gone: the run ends
    assert proc.stdin.frames == [
        {"type": "host_reply", "id": 4, "error": {"code": "unauthorized", "message": "the run is not active"}}
    ]
    assert taken is True
    assert relay._proc is None


def test_a_follow_up_for_no_running_run_is_not_taken():
    assert run(Relay().steer("nobody", "hello")) is False
