//! What a turn leaves with the host: the inbound event and user message,
//! the assistant's reply and what it asked the person, and the resume
//! pointer. All through `HostApi`,
//! so the embedded store and a remote host get the same writes.

use serde_json::Value;

use crate::harness::ResumePointer;
use crate::host::{HostApi, HostResult, NewEvent, NewTranscriptItem, RunScope};
use crate::interaction::{PENDING_KEY, Pending};
use crate::protocol::{AgentRunContext, JsonMap, StateScope};

/// Longest input summary kept on the event row.
const SUMMARY_CHARS: usize = 200;

fn summary(text: &str) -> String {
    text.chars().take(SUMMARY_CHARS).collect()
}

/// Record the turn's event and, when it has text, the user's message, so
/// this turn's and later turns' history shows them.
pub async fn inbound(host: &dyn HostApi, ctx: &AgentRunContext) -> HostResult<()> {
    let conversation = ctx.conversation.clone().unwrap_or_default();
    let text = ctx.input.to_text();
    host.append_event(NewEvent {
        event_id: ctx.event.event_id.clone(),
        event_type: ctx.event.event_type.clone(),
        event_time: ctx.event.event_time,
        source: ctx.event.source.clone(),
        bot_id: conversation.bot_id.clone(),
        workspace_id: conversation.workspace_id.clone(),
        conversation_id: conversation.conversation_id.clone(),
        thread_id: conversation.thread_id.clone(),
        actor_type: ctx.actor.as_ref().map(|a| a.actor_type.clone()),
        actor_id: ctx.actor.as_ref().and_then(|a| a.actor_id.clone()),
        actor_name: ctx.actor.as_ref().and_then(|a| a.actor_name.clone()),
        subject_type: ctx.subject.as_ref().map(|s| s.subject_type.clone()),
        subject_id: ctx.subject.as_ref().and_then(|s| s.subject_id.clone()),
        input_summary: (!text.is_empty()).then(|| summary(&text)),
        ..NewEvent::default()
    })
    .await?;
    let Some(conversation_id) = conversation.conversation_id else {
        return Ok(());
    };
    if text.trim().is_empty() {
        return Ok(());
    }
    let mut metadata = JsonMap::new();
    if let Some(actor) = &ctx.actor {
        if let Some(id) = &actor.actor_id {
            metadata.insert("actor_id".into(), Value::String(id.clone()));
        }
        if let Some(name) = &actor.actor_name {
            metadata.insert("actor_name".into(), Value::String(name.clone()));
        }
    }
    host.append_transcript(message(ctx, conversation_id, "user", text, metadata))
        .await?;
    Ok(())
}

/// A message of this turn's conversation, as a transcript item.
fn message(
    ctx: &AgentRunContext,
    conversation_id: String,
    role: &str,
    text: String,
    metadata: JsonMap,
) -> NewTranscriptItem {
    let conversation = ctx.conversation.clone().unwrap_or_default();
    NewTranscriptItem {
        event_id: ctx.event.event_id.clone(),
        conversation_id,
        thread_id: conversation.thread_id,
        bot_id: conversation.bot_id,
        workspace_id: conversation.workspace_id,
        role: role.into(),
        item_type: "message".into(),
        content: Some(text),
        metadata,
        ..NewTranscriptItem::default()
    }
}

/// Record the assistant's reply of this turn.
pub async fn reply(
    host: &dyn HostApi,
    ctx: &AgentRunContext,
    harness: &str,
    text: &str,
) -> HostResult<()> {
    let Some(conversation_id) = ctx.conversation_id().map(str::to_string) else {
        return Ok(());
    };
    if text.trim().is_empty() {
        return Ok(());
    }
    host.append_transcript(message(
        ctx,
        conversation_id,
        "assistant",
        text.to_string(),
        by_harness(ctx, harness),
    ))
    .await?;
    Ok(())
}

/// Record what this turn asked the person, as they read it (the card's
/// text), so the conversation's history shows what an "approve" that
/// follows answered.
pub async fn asked(
    host: &dyn HostApi,
    ctx: &AgentRunContext,
    harness: &str,
    pending: &Pending,
    text: String,
) -> HostResult<()> {
    let Some(conversation_id) = ctx.conversation_id().map(str::to_string) else {
        return Ok(());
    };
    let mut metadata = by_harness(ctx, harness);
    metadata.insert("interaction_id".into(), Value::String(pending.id.clone()));
    host.append_transcript(message(ctx, conversation_id, "assistant", text, metadata))
        .await?;
    Ok(())
}

/// What a message of the harness's carries: the run and the harness.
fn by_harness(ctx: &AgentRunContext, harness: &str) -> JsonMap {
    let mut metadata = JsonMap::new();
    metadata.insert("run_id".into(), Value::String(ctx.run_id.clone()));
    metadata.insert("harness".into(), Value::String(harness.into()));
    metadata
}

/// The conversation's resume pointer: the context's own state first (a
/// host that sends state), else the host's conversation state.
pub async fn pointer(
    host: &dyn HostApi,
    scope: &RunScope,
    ctx: &AgentRunContext,
) -> Option<ResumePointer> {
    if let Some(pointer) = ResumePointer::from_map(&ctx.state.conversation) {
        return Some(pointer);
    }
    scope.conversation_id.as_ref()?;
    let mut entries = JsonMap::new();
    for key in ResumePointer::KEYS {
        match host.state_get(scope, StateScope::Conversation, key).await {
            Ok(Some(value)) => {
                entries.insert(key.to_string(), value);
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!("cannot read the resume pointer ({e}); starting a fresh session");
                return None;
            }
        }
    }
    ResumePointer::from_map(&entries)
}

/// Store the pointer in the host's conversation state.
pub async fn store_pointer(
    host: &dyn HostApi,
    scope: &RunScope,
    pointer: &ResumePointer,
) -> HostResult<()> {
    for (key, value) in pointer.entries() {
        host.state_set(scope, StateScope::Conversation, key, &value)
            .await?;
    }
    Ok(())
}

/// The request open in this conversation, from the bridge's own record
/// in the host's conversation state only. Never from the context: a
/// context (its `state` too) may come from a less trusted caller, and a
/// request read from it would let that caller approve an action no card
/// ever showed. The harness cannot write the key either
/// (`host::calls::BRIDGE_KEY_PREFIX`).
pub async fn pending(host: &dyn HostApi, scope: &RunScope) -> Option<Pending> {
    scope.conversation_id.as_ref()?;
    match host
        .state_get(scope, StateScope::Conversation, PENDING_KEY)
        .await
    {
        Ok(value) => Pending::from_state(value.as_ref()),
        Err(e) => {
            tracing::warn!("cannot read the open request ({e}); taking the input as it is");
            None
        }
    }
}

/// Keep the open request (or `null`: none) in the conversation's state.
pub async fn store_pending(host: &dyn HostApi, scope: &RunScope, value: Value) -> HostResult<()> {
    if scope.conversation_id.is_none() {
        return Ok(());
    }
    host.state_set(scope, StateScope::Conversation, PENDING_KEY, &value)
        .await
}
