"""Interop check against the released langbot-plugin SDK's pydantic models.

`samples`  prints sample contexts and results built with the SDK's own
           models, one JSON object per line: {"kind": ..., "name": ..., "json": ...}.
`validate` reads the same line format on stdin (what harness-bridge
           re-serialized) and validates each item back in the SDK's models;
           prints one line per item: {"name": ..., "ok": bool, "error": ...}.
"""

import json
import sys

from langbot_plugin.api.entities.builtin.provider.message import (
    ContentElement,
    Message,
    MessageChunk,
)
from langbot_plugin.api.entities.builtin.runner.context import RunnerContext
from langbot_plugin.api.entities.builtin.runner.context_access import (
    ContextAccess,
    ContextAPICapabilities,
    InlineContextPolicy,
)
from langbot_plugin.api.entities.builtin.runner.delivery import DeliveryContext
from langbot_plugin.api.entities.builtin.runner.event import (
    ActorContext,
    AgentEventContext,
    ConversationContext,
    RawEventRef,
    SubjectContext,
)
from langbot_plugin.api.entities.builtin.runner.input import AgentInput, InputAttachment
from langbot_plugin.api.entities.builtin.runner.manifest import (
    RunnerCapabilities,
    RunnerManifest,
    RunnerPermissions,
)
from langbot_plugin.api.entities.builtin.runner.page_results import (
    AgentEventRecord,
    EventPage,
    HistoryPage,
    HistorySearchResult,
)
from langbot_plugin.api.entities.builtin.runner.resources import (
    AgentResources,
    ModelResource,
    SkillResource,
    StorageResource,
    ToolResource,
)
from langbot_plugin.api.entities.builtin.runner.result import RunnerResult
from langbot_plugin.api.entities.builtin.runner.runtime import AgentRuntimeContext
from langbot_plugin.api.entities.builtin.runner.state import AgentRunState
from langbot_plugin.api.entities.builtin.runner.errors import AgentAPIError
from langbot_plugin.api.entities.builtin.runner.transcript import TranscriptItem
from langbot_plugin.api.entities.builtin.runner.trigger import AgentTrigger

MODELS = {
    "context": RunnerContext,
    "result": RunnerResult,
    "manifest": RunnerManifest,
    "history_page": HistoryPage,
    "history_search": HistorySearchResult,
    "event_page": EventPage,
    "api_error": AgentAPIError,
}


def minimal_context():
    return RunnerContext(
        run_id="run-min",
        trigger=AgentTrigger(type="message.received"),
        event=AgentEventContext(event_id="ev-1", event_type="message.received", source="platform"),
        input=AgentInput(text="hi"),
        delivery=DeliveryContext(surface="platform"),
        resources=AgentResources(),
        runtime=AgentRuntimeContext(),
    )


def full_context():
    return RunnerContext(
        run_id="run-full",
        trigger=AgentTrigger(type="message.received", source="platform", timestamp=1767000000),
        event=AgentEventContext(
            event_id="ev-2",
            event_type="message.received",
            event_time=1767000000,
            source="platform",
            source_event_type="GroupMessage",
            raw_ref=RawEventRef(ref_id="raw-1", storage_key="raw/1"),
            data={"message_id": 42, "nested": {"a": [1, 2]}},
        ),
        conversation=ConversationContext(
            conversation_id="group_123",
            thread_id="t-9",
            launcher_type="group",
            launcher_id="123",
            sender_id="u-1",
            bot_id="bot-uuid",
            workspace_id="ws-1",
            session_id="group_123",
        ),
        actor=ActorContext(actor_type="user", actor_id="u-1", actor_name="Ada 🚀", metadata={"lang": "en"}),
        subject=SubjectContext(subject_type="message", subject_id="m-42", data={"quoted": None}),
        input=AgentInput(
            text="please summarise ../etc/passwd",
            contents=[
                ContentElement.from_text("please summarise"),
                ContentElement.from_image_url("https://example.invalid/a.png"),
            ],
            attachments=[
                InputAttachment(ref="att-1", type="file", mime_type="text/plain", size=12, name="notes.txt", source="url", url="https://example.invalid/notes.txt"),
            ],
        ),
        delivery=DeliveryContext(
            surface="platform",
            reply_target={"message_id": "m-42"},
            supports_streaming=True,
            supports_edit=True,
            max_message_size=4000,
            platform_capabilities={"markdown": True},
            automatic_reply=True,
        ),
        resources=AgentResources(
            models=[ModelResource(model_id="m1", model_type="chat", provider="x", operations=["invoke", "stream"])],
            tools=[ToolResource(tool_name="search", description="web", operations=["call"], parameters={"type": "object"})],
            skills=[SkillResource(skill_name="pdf", display_name="PDF", description="Read PDFs")],
            storage=StorageResource(plugin_storage=True, workspace_storage=False),
            platform_capabilities={"reactions": ["+1"]},
        ),
        context=ContextAccess(
            conversation_id="group_123",
            thread_id="t-9",
            latest_cursor="c-100",
            event_seq=100,
            transcript_seq=99,
            has_history_before=True,
            inline_policy=InlineContextPolicy(mode="current_event", delivered_count=1, source_total_count=100, reason="current_event_only"),
            available_apis=ContextAPICapabilities(history_page=True, history_search=True, event_get=True, state=True, storage=True, prompt_get=True, run_get=True),
        ),
        state=AgentRunState(conversation={"external.session_id": "abc"}, actor={"lang": "en"}),
        runtime=AgentRuntimeContext(langbot_version="4.11.2", trace_id="trace-1", deadline_at=1767000600.5, metadata={"k": 1}),
        variables={"user_name": "Ada", "count": 3},
        config={"model": "sonnet", "prompt": "Be brief."},
        metadata={"extra": True},
    )


def results():
    run = "run-full"
    chunk = MessageChunk(role="assistant", content="hel")
    msg = Message(role="assistant", content="hello")
    return [
        ("delta", RunnerResult.message_delta(run, chunk, sequence=1, timestamp=1767000000000)),
        ("completed", RunnerResult.message_completed(run, msg, sequence=2)),
        ("completed_parts", RunnerResult.message_completed(run, Message(role="assistant", content=[ContentElement.from_text("hi")]), file_ids=["f1"])),
        ("tool_started", RunnerResult.tool_call_started(run, "t1", "mcp__langbot__history_page", {"limit": 5})),
        ("tool_completed", RunnerResult.tool_call_completed(run, "t1", "mcp__langbot__history_page", {"items": []}, None)),
        ("state", RunnerResult.state_updated(run, "external.session_id", "abc", "conversation")),
        ("action", RunnerResult.action_requested(run, "message.edit", {"message_id": "x"}, {"text": "y"})),
        ("run_completed", RunnerResult.run_completed(run, msg, usage={"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15, "cache_read": 3})),
        ("run_failed", RunnerResult.run_failed(run, "failed to call external agent", "runner.error")),
        ("log", RunnerResult(run_id=run, type="processor.log", data={"text": "note", "level": "info"})),
    ]


def samples():
    out = []
    out.append(("context", "minimal", minimal_context()))
    out.append(("context", "full", full_context()))
    for name, result in results():
        out.append(("result", name, result))
    out.append(("manifest", "manifest", RunnerManifest(
        id="plugin:a/b/c", name="c", label={"en_US": "C"}, usages=["agent"],
        capabilities=RunnerCapabilities(streaming=True, interrupt=True, steering=True),
        permissions=RunnerPermissions(history=["page", "search"], events=["get"], storage=["plugin"], models=["invoke", "count_tokens"]),
    )))
    item = TranscriptItem(transcript_id="tr1", event_id="ev-1", conversation_id="c1", bot_id="b", role="user", content="hi", attachment_refs=[{"artifact_id": "a1"}], seq=1, cursor="x", created_at=1)
    out.append(("history_page", "history_page", HistoryPage(items=[item], next_cursor="n", has_more=True, total_count=10)))
    out.append(("history_search", "history_search", HistorySearchResult(items=[item], query="hi")))
    out.append(("event_page", "event_page", EventPage(items=[AgentEventRecord(event_id="ev-1", event_type="message.received", source="platform", conversation_id="c1", seq=1)])))
    out.append(("api_error", "api_error", AgentAPIError(code="unauthorized", message="no", details={"k": 1})))
    for kind, name, model in out:
        print(json.dumps({"kind": kind, "name": name, "json": model.model_dump(mode="json")}))


def validate():
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        item = json.loads(line)
        try:
            MODELS[item["kind"]].model_validate(item["json"])
            print(json.dumps({"name": item["name"], "ok": True, "error": None}))
        except Exception as exc:  # report, never stop: the caller asserts
            print(json.dumps({"name": item["name"], "ok": False, "error": str(exc)}))


if __name__ == "__main__":
    {"samples": samples, "validate": validate}[sys.argv[1]]()
