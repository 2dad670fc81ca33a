//! `/new` and `/resume`: the conversation's resume pointer put aside and
//! brought back. Earlier sessions are kept in the conversation's state
//! (`external.sessions`, newest first), a key the harness may read and
//! never write, so a model cannot send the next turn into a session of
//! its choosing. Neither changes anything while a turn runs: that turn
//! would write its own pointer back as it ends.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Asked, age};
use crate::harness::{EARLIER_SESSIONS_KEY, ResumePointer, SESSION_FILES_KEY};
use crate::host::{HostResult, now_ms};
use crate::protocol::StateScope;
use crate::run::Bridge;
use crate::run::turn::record;

/// How many earlier sessions a conversation keeps.
const KEPT: usize = 20;

/// A session put aside.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Earlier {
    session_id: String,
    harness: String,
    working_directory: String,
    /// When it was put aside (epoch milliseconds).
    left_ms: i64,
}

impl Earlier {
    fn of(pointer: ResumePointer) -> Earlier {
        Earlier {
            session_id: pointer.session_id,
            harness: pointer.harness,
            working_directory: pointer.working_directory,
            left_ms: now_ms(),
        }
    }

    fn pointer(&self) -> ResumePointer {
        ResumePointer {
            harness: self.harness.clone(),
            session_id: self.session_id.clone(),
            working_directory: self.working_directory.clone(),
        }
    }

    /// `3f2a9c1e… (claude-code), left 2026-11-29 16:40 UTC`.
    fn line(&self) -> String {
        format!(
            "{} ({}), left {} UTC",
            short(&self.session_id),
            self.harness,
            crate::protocol::time::date_time(self.left_ms.div_euclid(1000))
        )
    }
}

/// The first 8 characters of a session id, as a person tells them apart.
pub(super) fn short(id: &str) -> String {
    match id.char_indices().nth(8) {
        Some((end, _)) => format!("{}…", &id[..end]),
        None => id.to_string(),
    }
}

/// The sentence refusing to change sessions while a turn runs.
async fn busy(asked: &Asked<'_>, word: &str) -> Option<String> {
    let in_flight = match asked.asking.turns.in_flight(&asked.conversation).await {
        Ok(turns) => turns,
        Err(why) => {
            return Some(format!(
                "Whether a turn runs cannot be told now ({why}); nothing changed."
            ));
        }
    };
    let running = in_flight.into_iter().find(|t| t.started_ms.is_some())?;
    let since = running.started_ms.map(age).unwrap_or_default();
    let prefix = &asked.access.prefix;
    Some(format!(
        "A turn is running (for {since}): send {prefix}stop first, then {prefix}{word}."
    ))
}

async fn earlier(asked: &Asked<'_>) -> HostResult<Vec<Earlier>> {
    let value = asked
        .host
        .state_get(&asked.scope, StateScope::Conversation, EARLIER_SESSIONS_KEY)
        .await?;
    Ok(value
        .and_then(|v| serde_json::from_value::<Vec<Earlier>>(v).ok())
        .unwrap_or_default())
}

/// Keep `list` as the earlier sessions and `pointer` as the current one
/// (`None`: the next turn starts fresh).
async fn keep(
    asked: &Asked<'_>,
    mut list: Vec<Earlier>,
    pointer: Option<&ResumePointer>,
) -> HostResult<()> {
    list.truncate(KEPT);
    let (host, scope) = (asked.host, &asked.scope);
    let value = serde_json::to_value(&list).unwrap_or(Value::Null);
    host.state_set(
        scope,
        StateScope::Conversation,
        EARLIER_SESSIONS_KEY,
        &value,
    )
    .await?;
    // A copy of the session's files follows only the session it was taken of.
    host.state_delete(scope, StateScope::Conversation, SESSION_FILES_KEY)
        .await?;
    match pointer {
        Some(pointer) => record::store_pointer(host, scope, pointer).await,
        None => {
            for key in ResumePointer::KEYS {
                host.state_delete(scope, StateScope::Conversation, key)
                    .await?;
            }
            Ok(())
        }
    }
}

/// The conversation's kept process ends: the next turn starts its own.
async fn end_live(bridge: &Bridge, asked: &Asked<'_>) {
    if let Some(live) = bridge.live_sessions() {
        live.end_conversation(&asked.conversation).await;
    }
}

/// `/new`.
pub(super) async fn new(bridge: &Bridge, asked: &Asked<'_>) -> (String, bool) {
    if let Some(why) = busy(asked, "new").await {
        return (why, true);
    }
    let current = record::pointer(asked.host, &asked.scope, asked.asking.ctx).await;
    end_live(bridge, asked).await;
    let Some(current) = current else {
        return (
            "There is no session here yet: your next message starts one.".into(),
            false,
        );
    };
    let kept = async {
        let mut list = earlier(asked).await?;
        list.retain(|e| e.session_id != current.session_id);
        list.insert(0, Earlier::of(current.clone()));
        keep(asked, list, None).await
    };
    if let Err(e) = kept.await {
        return (
            format!("The session could not be put aside ({e}); nothing changed."),
            true,
        );
    }
    let prefix = &asked.access.prefix;
    (
        format!(
            "Started over: your next message begins a fresh session. The last one ({}) is kept: \
             {prefix}resume 1 goes back to it.",
            short(&current.session_id)
        ),
        false,
    )
}

/// `/resume` (the list) and `/resume N`.
pub(super) async fn resume(bridge: &Bridge, asked: &Asked<'_>, args: &str) -> (String, bool) {
    let mut list = match earlier(asked).await {
        Ok(list) => list,
        Err(e) => return (format!("The earlier sessions cannot be read ({e})."), true),
    };
    let prefix = &asked.access.prefix;
    if args.is_empty() {
        if list.is_empty() {
            return ("There are no earlier sessions here.".into(), false);
        }
        let mut lines = vec![format!(
            "Earlier sessions here ({prefix}resume N goes back to one):"
        )];
        lines.extend(
            list.iter()
                .zip(1..)
                .map(|(e, n)| format!("{n}. {}", e.line())),
        );
        return (lines.join("\n"), false);
    }
    let n = match args.parse::<usize>() {
        Ok(n) if (1..=list.len()).contains(&n) => n,
        _ => {
            let have = match list.len() {
                0 => "there are none".to_string(),
                1 => "there is 1".to_string(),
                n => format!("there are 1 to {n}"),
            };
            return (
                format!(
                    "There is no earlier session `{args}` here ({have}: {prefix}resume lists them)."
                ),
                true,
            );
        }
    };
    if let Some(why) = busy(asked, "resume").await {
        return (why, true);
    }
    let current = record::pointer(asked.host, &asked.scope, asked.asking.ctx).await;
    let chosen = list.remove(n - 1);
    if let Some(current) = current.filter(|c| c.session_id != chosen.session_id) {
        list.insert(0, Earlier::of(current));
    }
    if let Err(e) = keep(asked, list, Some(&chosen.pointer())).await {
        return (
            format!("The session could not be brought back ({e}); nothing changed."),
            true,
        );
    }
    end_live(bridge, asked).await;
    (
        format!(
            "Back to session {}: your next message continues it.",
            chosen.line()
        ),
        false,
    )
}
