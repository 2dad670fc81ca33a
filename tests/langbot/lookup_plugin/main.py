"""A test plugin: a word-matching knowledge engine and a fixed weather tool."""

from __future__ import annotations

from langbot_plugin.api.definition.plugin import BasePlugin


class LookupPlugin(BasePlugin):
    async def initialize(self) -> None:
        pass
