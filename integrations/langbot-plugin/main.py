"""The harness-bridge plugin: its Runners relay each run to the
harness-bridge binary, which runs Claude Code or Codex."""

from __future__ import annotations

from langbot_plugin.api.definition.plugin import BasePlugin


class HarnessBridgePlugin(BasePlugin):
    """Nothing to do at start: the bridge process starts with the first run."""

    async def initialize(self) -> None:
        pass
