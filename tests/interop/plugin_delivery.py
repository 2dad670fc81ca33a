"""The plugin's delivery, run through the released SDK without a bridge.

Each case builds a `RunnerContext` with the SDK's own models, replaces the
relay to the bridge with the case's scripted bridge results, and runs the
plugin's Claude Code runner through the SDK's `Runner.invoke` (the path the
plugin runtime takes: `ctx.reply` and `ctx.reply_stream()` go through the
SDK's traced run API). The host side of the actions is a stand-in that
records each one and answers as LangBot does.

Usage: python plugin_delivery.py SCENARIO.json
SCENARIO: {"plugin_dir", "cases": [{"name", "context", "bridge": [results],
           "delay"?: seconds between bridge results, "plugin_config"?,
           "fail"?: [what the host refuses: an action's name, or
           "reply_stream:<operation>"],
           "runner"?: "codex" (else Claude Code), "turns"?: [[results]] (the
           bridge's results for each turn the runner relays, in place of
           "bridge"), "steering"?: [items the first steering_pull returns],
           "taken"?: whether the bridge's running turn takes a steer}]}
Prints one JSON line per case: {"case", "results", "actions", "context",
"contexts" (every turn's), "steers"}.
"""

from __future__ import annotations

import asyncio
import copy
import json
import sys


class Host:
    """The runtime's side of the plugin's actions, as LangBot answers them."""

    def __init__(self, fail: list[str], steering: list[dict] | None = None) -> None:
        self.fail = set(fail)
        self.actions: list[dict] = []
        self.steering = list(steering or [])

    async def call_action(self, action, data, timeout=15.0):
        name = getattr(action, "value", str(action))
        self.actions.append({"action": name, "data": copy.deepcopy(data)})
        if name in self.fail or f"{name}:{data.get('operation')}" in self.fail:
            from langbot_plugin.entities.io.errors import ActionCallError

            raise ActionCallError(f"the host refused {name}")
        if name == "steering_pull":
            items, self.steering = self.steering, []
            return {"items": items}
        if name == "reply_stream":
            status = {"update": "open", "finish": "completed", "abort": "cancelled"}[data["operation"]]
            return {"result": {"stream_id": data["stream_id"], "status": status, "delivery": "buffered"}}
        return {"result": {"ok": True}}


async def run_case(case: dict) -> dict:
    from langbot_plugin.api.entities.builtin.runner import RunnerContext

    import components.runner.bridge as bridge
    import components.runner.harness_runner as harness_runner
    from components.runner.claude_code import ClaudeCode
    from components.runner.codex import Codex

    sent: dict = {"contexts": [], "steers": []}
    turns = [copy.deepcopy(t) for t in case.get("turns") or [case["bridge"]]]

    async def fake_run(**kwargs):
        sent.setdefault("context", kwargs["context"])
        sent["contexts"].append(copy.deepcopy(kwargs["context"]))
        for result in turns.pop(0) if turns else []:
            if case.get("delay"):
                await asyncio.sleep(case["delay"])
            yield copy.deepcopy(result)

    async def fake_steer(run_id, text, actor=None, only_command=False):
        sent["steers"].append({"run_id": run_id, "text": text, "actor": actor, "only_command": only_command})
        return bool(case.get("taken"))

    bridge.RELAY.run = fake_run
    bridge.RELAY.steer = fake_steer
    harness_runner.STEERING_INTERVAL = 0.05
    host = Host(case.get("fail", []), case.get("steering"))
    runner = Codex() if case.get("runner") == "codex" else ClaudeCode()
    runner.bind_runtime(
        plugin_runtime_handler=host,
        plugin_config=case.get("plugin_config", {"bridge_path": "/bin/true"}),
    )
    ctx = RunnerContext.model_validate(case["context"])
    results = []
    async for result in runner.invoke(ctx):
        results.append(result.model_dump(mode="json", exclude_none=True))
    return {"case": case["name"], "results": results, "actions": host.actions, "context": sent.get("context"),
            "contexts": sent["contexts"], "steers": sent["steers"]}


async def main(path: str) -> int:
    with open(path) as f:
        scenario = json.load(f)
    sys.path.insert(0, scenario["plugin_dir"])
    for case in scenario["cases"]:
        print(json.dumps(await run_case(case)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1])))
