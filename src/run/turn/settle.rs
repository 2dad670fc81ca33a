//! The turn's last phase: what the host keeps, then the one terminal
//! result. The resume pointer (kept only in the form the spec's ids take),
//! the card for a request the turn asked and the open request in the
//! conversation's state, the reply in the history; then `run.completed`
//! (with the session facts) or `run.failed`; on a shared store, after it,
//! a copy of the session's files (`follow`).
//!
//! Each host write is bounded by the deadline: a host that does not answer
//! never holds the person's answer back.

use serde_json::json;
use tokio::time::Instant;

use super::drive::Driven;
use super::prepare::Prepared;
use super::{answers, record};
use crate::harness::ResumePointer;
use crate::interaction::{self, PENDING_KEY, Pending};
use crate::projection::safe_component;
use crate::protocol::{
    ActionRequested, AgentRunContext, FailureCode, INTERACTION_REQUESTED, Message,
    MessageCompleted, ResultPayload, RunCompleted, StateScope, StateUpdated,
};
use crate::run::io::emit::project_message;
use crate::run::io::outbox;
use crate::run::{AFTER_DEADLINE, Bridge, Emitter, HOST_CALL_TIMEOUT, follow};

impl Bridge {
    /// Keep what the turn left (pointer, open request, reply) and send its
    /// terminal result.
    pub(in crate::run) async fn settle(
        &self,
        turn_io: &mut super::TurnIo<'_, '_>,
        turn: &Prepared<'_>,
        driven: Driven,
    ) {
        let (ctx, cancel) = (turn_io.ctx, turn_io.cancel);
        let (emit, summary) = (&mut *turn_io.emit, &mut *turn_io.summary);
        let Driven {
            mut end,
            resumed,
            notice,
            process,
        } = driven;
        // A harness that could not sign in ran no session worth a pointer:
        // the next turn, once it can, starts afresh. The sentence says how.
        let signed_out = matches!(&end.terminal,
            ResultPayload::RunFailed(f) if f.code == FailureCode::NotSignedIn);
        if signed_out {
            end.session_id = None;
            if let (ResultPayload::RunFailed(failed), Some(how)) =
                (&mut end.terminal, turn.spec.sign_in.as_deref())
            {
                failed.error = format!("{}: {how}", failed.error);
            }
        }
        summary.resumed = resumed;
        emit.set_usage(end.usage.clone());
        let spec = turn.spec;
        let session_id = kept_session_id(spec, end.session_id.clone());
        if let Some(session_id) = &session_id {
            summary.session_id = Some(session_id.clone());
            self.keep_pointer(turn, session_id, emit).await;
        }
        // What this turn asked the person goes out as a card and stays in
        // the conversation's state until answered; an answered or lapsed
        // request is cleared.
        let asked = self.tools.interactions().close(&ctx.run_id).map(|mut p| {
            p.asked_by = ctx.actor.as_ref().and_then(|a| {
                Some(interaction::Asker {
                    id: a.actor_id.clone()?,
                    name: a.actor_name.clone(),
                })
            });
            p
        });
        self.keep_request(turn, asked.as_ref(), emit).await;
        tell_changes(ctx, turn, emit).await;
        self.record_reply(ctx, turn, asked.as_ref(), emit).await;
        let session = json!({"session": {
            "harness": spec.name,
            "session_id": session_id,
            "resumed": resumed,
            "process": process,
            "notice": notice,
        }});
        // Its files measured once the bridge's snapshot of them is kept.
        if let Some(over) = self.over_disk(turn).await
            && !cancel.is_cancelled()
        {
            tracing::warn!("{over}");
            end.terminal =
                ResultPayload::RunFailed(crate::run::fail(FailureCode::ResourceLimit, over));
        }
        let terminal = terminal(
            end.terminal,
            asked.is_some() && !cancel.is_cancelled(),
            session,
            notice.as_deref(),
            || emit.reply(),
        );
        emit.send(vec![terminal]).await;
        // After the person has the answer (the run still holds its
        // conversation, so the copy is fenced as every write of it): the
        // harness writes its session out a little after its result.
        if let Some(session_id) = &session_id {
            self.keep_session_files(turn, session_id).await;
        }
        archive_ahead(&turn.projection).await;
    }

    /// The turn's reply, and what it asked the person, in the host's
    /// transcript (where the host does not keep its own).
    async fn record_reply(
        &self,
        ctx: &AgentRunContext,
        turn: &Prepared<'_>,
        asked: Option<&Pending>,
        emit: &Emitter,
    ) {
        if !self.settings.record_turns {
            return;
        }
        let spec = turn.spec;
        if let Err(e) = record::reply(turn.host, ctx, &spec.name, &emit.reply()).await {
            tracing::warn!("cannot record the reply: {e}");
        }
        if let Some(pending) = asked {
            let text = pending.fallback_text(&spec.label);
            if let Err(e) = record::asked(turn.host, ctx, &spec.name, pending, text).await {
                tracing::warn!("cannot record what the turn asked: {e}");
            }
        }
    }

    /// Why the conversation's files are over its disk limit after the
    /// turn, if they are (`cage.limits.disk_mb`, measured: its workspace
    /// and what the bridge keeps for its worktree).
    async fn over_disk(&self, turn: &Prepared<'_>) -> Option<String> {
        let limit_mb = self.settings.cage.limits.disk_mb;
        if limit_mb == 0 {
            return None;
        }
        let limit = limit_mb.saturating_mul(1024 * 1024);
        let mut paths = vec![turn.projection.workspace.clone()];
        if let Some((checkout, _)) = &turn.checkout {
            paths.extend(checkout.kept_elsewhere());
        }
        let measure = |paths: Vec<std::path::PathBuf>| async move {
            tokio::task::spawn_blocking(move || crate::disk::used(&paths, limit))
                .await
                .unwrap_or(0)
        };
        let mut used = measure(paths.clone()).await;
        if used > limit
            && let Some((checkout, _)) = &turn.checkout
        {
            // Snapshots of files the turn removed may still be kept.
            checkout.release_snapshots().await;
            used = measure(paths).await;
        }
        (used > limit).then(|| {
            format!(
                "the conversation's files take more than {} of disk, over its limit of {limit_mb} \
                 MiB (cage.limits.disk_mb); the turn's work is kept, and its next turn can \
                 remove files",
                crate::disk::amount(limit)
            )
        })
    }

    /// On a shared store, keep a copy of the session's files with the
    /// conversation, so the session can follow it to another instance.
    async fn keep_session_files(&self, turn: &Prepared<'_>, session_id: &str) {
        let Some(limit) = self.settings.follow_sessions else {
            return;
        };
        let wait = (Instant::now() + HOST_CALL_TIMEOUT).min(turn.deadline + AFTER_DEADLINE);
        let kept = follow::keep(
            turn.host,
            &turn.open.grant.scope,
            turn.spec,
            &turn.env,
            &turn.workspace,
            session_id,
            limit,
        );
        if tokio::time::timeout_at(wait, kept).await.is_err() {
            tracing::warn!("the host did not answer keeping the session's files");
        }
    }

    /// Send the resume pointer as `state.updated` results and store it.
    async fn keep_pointer(&self, turn: &Prepared<'_>, session_id: &str, emit: &mut Emitter) {
        let pointer = ResumePointer {
            harness: turn.spec.name.clone(),
            session_id: session_id.to_string(),
            working_directory: turn.workspace.to_string_lossy().into_owned(),
        };
        let updates = pointer
            .entries()
            .into_iter()
            .map(|(key, value)| {
                ResultPayload::StateUpdated(StateUpdated {
                    scope: StateScope::Conversation,
                    key: key.into(),
                    value,
                })
            })
            .collect();
        emit.send(updates).await;
        // Bounded by the deadline too: a host that does not answer must
        // not hold a stopped turn's answer back (the `state.updated`
        // results above carry the pointer anyway).
        let wait = (Instant::now() + HOST_CALL_TIMEOUT).min(turn.deadline + AFTER_DEADLINE);
        let scope = &turn.open.grant.scope;
        let stored =
            tokio::time::timeout_at(wait, record::store_pointer(turn.host, scope, &pointer)).await;
        match stored {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!("cannot store the resume pointer: {e}"),
            Err(_) => tracing::warn!("the host did not answer storing the resume pointer"),
        }
    }

    /// Send the card for what the turn asked, and keep the open request in
    /// the conversation's state (or clear one this turn answered).
    async fn keep_request(&self, turn: &Prepared<'_>, asked: Option<&Pending>, emit: &mut Emitter) {
        let kept = match asked {
            Some(pending) => {
                if let Some(whole) = answers::attachment(pending) {
                    emit.send(vec![ResultPayload::ArtifactCreated(whole)]).await;
                }
                let request = pending.request(&turn.spec.label);
                let payload = serde_json::to_value(&request)
                    .ok()
                    .and_then(|v| v.as_object().cloned());
                emit.send(vec![ResultPayload::ActionRequested(ActionRequested {
                    action: INTERACTION_REQUESTED.into(),
                    target: None,
                    payload,
                })])
                .await;
                serde_json::to_value(pending).ok()
            }
            None => turn.answer.clears().then_some(serde_json::Value::Null),
        };
        let Some(value) = kept else {
            return;
        };
        emit.send(vec![ResultPayload::StateUpdated(StateUpdated {
            scope: StateScope::Conversation,
            key: PENDING_KEY.into(),
            value: value.clone(),
        })])
        .await;
        let wait = (Instant::now() + HOST_CALL_TIMEOUT).min(turn.deadline + AFTER_DEADLINE);
        let scope = &turn.open.grant.scope;
        let stored =
            tokio::time::timeout_at(wait, record::store_pending(turn.host, scope, value)).await;
        if !matches!(stored, Ok(Ok(()))) {
            tracing::warn!("cannot keep the open request in the conversation's state");
        }
    }
}

/// The session id the harness printed, kept only in the form the spec
/// says its ids take: the pointer is passed back to it.
fn kept_session_id(spec: &crate::harness::AdapterSpec, printed: Option<String>) -> Option<String> {
    printed.filter(|id| {
        let fits = spec.session_id_format.accepts(id);
        if !fits {
            tracing::warn!(
                "{} named its session `{}`, which is not {}; it is not kept",
                spec.label,
                id.escape_debug().take(80).collect::<String>(),
                spec.session_id_format.describe()
            );
        }
        fits
    })
}

/// What the turn changed in its project's worktree, for the person: a
/// summary (files, lines, commits) and the whole diff as a file; nothing
/// when nothing changed. A worktree git cannot read is said so too.
async fn tell_changes(ctx: &AgentRunContext, turn: &Prepared<'_>, emit: &mut Emitter) {
    let Some((checkout, before)) = &turn.checkout else {
        return;
    };
    if !checkout.notes.is_empty() {
        emit.send(vec![ResultPayload::MessageCompleted(MessageCompleted {
            message: project_message(checkout.notes.join("\n"), &checkout.branch),
            file_ids: Vec::new(),
        })])
        .await;
    }
    let text = match checkout.changes_since(before).await {
        Ok(None) => return,
        Ok(Some(changes)) if changes.is_only_notes() => changes.summary(None),
        Ok(Some(changes)) => {
            let name = format!("changes-{}.diff", safe_component(&ctx.run_id));
            let summary = changes.summary(Some(&name));
            let scope = &turn.open.grant.scope;
            let diff = outbox::created(name, changes.diff, scope, turn.host).await;
            emit.send(vec![
                ResultPayload::MessageCompleted(MessageCompleted {
                    message: project_message(summary, &checkout.branch),
                    file_ids: Vec::new(),
                }),
                ResultPayload::ArtifactCreated(diff),
            ])
            .await;
            return;
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot tell what the turn changed in the worktree");
            format!(
                "What this turn changed on branch `{}` could not be read (the bridge's log says why).",
                checkout.branch
            )
        }
    };
    emit.send(vec![ResultPayload::MessageCompleted(MessageCompleted {
        message: project_message(text, &checkout.branch),
        file_ids: Vec::new(),
    })])
    .await;
}

/// The turn's terminal result from the harness's: a turn that asked the
/// person ends with the question (even when the harness was interrupted
/// to stop it going on); a completed one carries the session facts and
/// the reply (`reply`, when the harness gave no message); a failed one
/// says why the session is fresh.
fn terminal(
    harness_end: ResultPayload,
    asked: bool,
    session: serde_json::Value,
    notice: Option<&str>,
    reply: impl FnOnce() -> String,
) -> ResultPayload {
    let end = match harness_end {
        ResultPayload::RunFailed(failed) if asked && failed.code == FailureCode::HarnessError => {
            tracing::info!(
                "the harness stopped after asking the person: {}",
                failed.error
            );
            ResultPayload::RunCompleted(RunCompleted {
                finish_reason: "interaction_requested".into(),
                message: None,
            })
        }
        other => other,
    };
    match end {
        ResultPayload::RunCompleted(mut done) => {
            let mut message = done
                .message
                .take()
                .unwrap_or_else(|| Message::assistant(reply()));
            message.extra.insert("metadata".into(), session);
            done.message = Some(message);
            ResultPayload::RunCompleted(done)
        }
        ResultPayload::RunFailed(mut failed) => {
            if let Some(notice) = notice {
                failed.error = format!("{}\n({notice})", failed.error);
            }
            ResultPayload::RunFailed(failed)
        }
        other => other,
    }
}

/// Archive the turn's files for the next turn, off the runtime's workers;
/// a failure is only logged (the next projection archives them).
async fn archive_ahead(projection: &crate::projection::Projection) {
    let (projection_dir, keep_runs) = (projection.dir.clone(), projection.keep_runs);
    let archived = tokio::task::spawn_blocking(move || {
        crate::projection::archive_ahead(&projection_dir, keep_runs)
    })
    .await;
    match archived {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!("cannot archive the turn's files ahead of the next: {e}"),
        Err(e) => tracing::error!("archiving the turn's files ahead of the next failed: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::RunFailed;

    fn failed(code: FailureCode) -> ResultPayload {
        ResultPayload::RunFailed(RunFailed {
            code,
            error: "it stopped".into(),
            retryable: false,
        })
    }

    #[test]
    fn a_turn_that_asked_ends_with_the_question_not_the_interruption() {
        let end = terminal(
            failed(FailureCode::HarnessError),
            true,
            json!({}),
            None,
            String::new,
        );
        let ResultPayload::RunCompleted(done) = end else {
            panic!("expected run.completed, got {end:?}");
        };
        assert_eq!(done.finish_reason, "interaction_requested");
    }

    #[test]
    fn a_deadline_stays_a_failure_even_after_asking() {
        let end = terminal(
            failed(FailureCode::DeadlineExceeded),
            true,
            json!({}),
            None,
            String::new,
        );
        assert!(
            matches!(end, ResultPayload::RunFailed(f) if f.code == FailureCode::DeadlineExceeded)
        );
    }

    #[test]
    fn a_completed_turn_carries_the_session_facts_and_the_streamed_reply() {
        let done = ResultPayload::RunCompleted(RunCompleted {
            finish_reason: "stop".into(),
            message: None,
        });
        let end = terminal(
            done,
            false,
            json!({"session": {"session_id": "s1"}}),
            None,
            || "hello".into(),
        );
        let ResultPayload::RunCompleted(done) = end else {
            panic!("expected run.completed");
        };
        let message = done.message.expect("a message");
        assert_eq!(
            message.content.map(|c| c.to_text()).as_deref(),
            Some("hello")
        );
        assert_eq!(message.extra["metadata"]["session"]["session_id"], "s1");
    }

    #[test]
    fn a_failure_says_why_the_session_is_fresh() {
        let end = terminal(
            failed(FailureCode::HarnessError),
            false,
            json!({}),
            Some("The previous session no longer exists."),
            String::new,
        );
        let ResultPayload::RunFailed(failed) = end else {
            panic!("expected run.failed");
        };
        assert_eq!(
            failed.error,
            "it stopped\n(The previous session no longer exists.)"
        );
    }
}
