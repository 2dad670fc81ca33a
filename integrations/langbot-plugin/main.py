"""The harness-bridge plugin: one Runner per harness harness-bridge runs
(components/runner/, written by scripts/langbot-runners from the bridge's
catalog), each relaying its runs to the harness-bridge binary."""

from __future__ import annotations

from langbot_plugin.api.definition.plugin import BasePlugin


class HarnessBridgePlugin(BasePlugin):
    """Nothing to do at start: the bridge process starts with the first run."""

    async def initialize(self) -> None:
        pass
