"""A tool with a fixed answer naming the city it was asked about."""

from __future__ import annotations

from typing import Any

from langbot_plugin.api.definition.components.tool.tool import Tool


class Weather(Tool):
    async def call(self, params: dict[str, Any], session: Any, query_id: int) -> dict[str, Any]:
        return {"forecast": f"LANGBOT TOOL: sunny over {params.get('city', '?')}"}
