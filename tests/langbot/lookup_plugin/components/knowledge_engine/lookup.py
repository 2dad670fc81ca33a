"""Passages given when the knowledge base is created, found by words: a
knowledge engine that needs no embedding model."""

from __future__ import annotations

from langbot_plugin.api.definition.components.knowledge_engine.engine import KnowledgeEngine
from langbot_plugin.api.entities.builtin.provider.message import ContentElement
from langbot_plugin.api.entities.builtin.rag.context import (
    RetrievalContext,
    RetrievalResponse,
    RetrievalResultEntry,
)
from langbot_plugin.api.entities.builtin.rag.enums import DocumentStatus
from langbot_plugin.api.entities.builtin.rag.models import IngestionContext, IngestionResult


class Lookup(KnowledgeEngine):
    @classmethod
    def get_capabilities(cls) -> list[str]:
        return []

    async def ingest(self, context: IngestionContext) -> IngestionResult:
        return IngestionResult(
            document_id=context.file_object.metadata.document_id,
            status=DocumentStatus.FAILED,
            error_message="this engine holds only the passages given at creation",
        )

    async def delete_document(self, kb_id: str, document_id: str) -> bool:
        return True

    async def retrieve(self, context: RetrievalContext) -> RetrievalResponse:
        words = [w.lower() for w in context.query.split() if w]
        passages = [p.strip() for p in str(context.creation_settings.get("passages", "")).splitlines() if p.strip()]
        hits = [p for p in passages if any(w in p.lower() for w in words)]
        entries = [
            RetrievalResultEntry(
                id=f"passage-{i}",
                content=[ContentElement.from_text(p)],
                metadata={"engine": "lookup", "kb": context.knowledge_base_id},
                distance=0.0,
                score=1.0,
            )
            for i, p in enumerate(hits)
        ]
        return RetrievalResponse(results=entries, total_found=len(entries))
