//! A harness session follows its conversation to another instance.
//!
//! On a shared store, a conversation moves when its instance dies or is
//! drained; its worktree follows through the project's remote, and its
//! transcript is in the store. The harness's own session is a file in the
//! conversation's home on the lost instance's disk: so after each turn a
//! copy of the session's files is kept in the conversation's state
//! ([`SESSION_FILES_KEY`], one of the bridge's own keys, which no harness
//! may write), and the instance that takes the conversation over writes
//! them into the new home at the place its harness looks, then resumes.
//!
//! A copy is bounded (the operator's limit): a session larger than that
//! is not kept, and the next instance says so. Files are read without
//! following a link anywhere below the workspace (the harness could have
//! put one there to have another conversation's session copied into its
//! state), and a copy's names are checked against the store's layout
//! before anything is written.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};

use crate::harness::{AdapterSpec, ResumePointer, SESSION_FILES_KEY, SessionStore};
use crate::host::{HostApi, RunScope};
use crate::projection::{ConfinedDir, read_beneath};
use crate::protocol::StateScope;

/// Why the session of a conversation taken over could not follow it, as
/// the end of a sentence ("… could not follow it here: {why}").
pub(super) type NotFollowed = String;

/// The store folder of `spec`'s sessions for `workspace`, relative to the
/// workspace: `None` when the store is not known or not inside it (the
/// conversation's home is).
fn folder_within(
    store: SessionStore,
    env: &BTreeMap<String, String>,
    workspace: &Path,
) -> Option<PathBuf> {
    let folder = store.folder(env, workspace)?;
    folder.strip_prefix(workspace).ok().map(Path::to_path_buf)
}

/// The copy of session `id`'s files to keep, or a note that it is too
/// large (kept instead, so the next instance can say why). `None`: there
/// is nothing this bridge can copy for this harness.
fn pack(
    store: SessionStore,
    harness: &str,
    env: &BTreeMap<String, String>,
    workspace: &Path,
    id: &str,
    limit: u64,
) -> Option<Value> {
    let below = folder_within(store, env, workspace)?;
    let names = store.session_files(env, workspace, id)?.names;
    if names.is_empty() {
        return None;
    }
    let mut files = Vec::new();
    let mut total = 0u64;
    for name in names {
        let read = match read_beneath(workspace, &below.join(&name), limit.saturating_add(1)) {
            Ok(read) => read,
            Err(e) => {
                tracing::warn!(file = %name, "the session's file is not copied for another instance: {e}");
                return None;
            }
        };
        total = total.saturating_add(read.size);
        if total > limit {
            return Some(json!({
                "harness": harness, "session_id": id, "too_large": total,
            }));
        }
        files.push(match String::from_utf8(read.bytes) {
            Ok(text) => json!({"name": name, "text": text}),
            Err(e) => json!({
                "name": name,
                "base64": base64::engine::general_purpose::STANDARD.encode(e.as_bytes()),
            }),
        });
    }
    Some(json!({"harness": harness, "session_id": id, "files": files}))
}

/// How often [`settled`] looks, how many looks alike make the files
/// settled, and how long it waits at most.
const LOOK_EVERY: Duration = Duration::from_millis(25);
const QUIET_LOOKS: u32 = 4;
const SETTLE_AT_MOST: Duration = Duration::from_secs(1);

/// Wait until session `id`'s files are there and have stopped changing:
/// a harness kept alive writes its turn out a little after the turn's
/// result (Claude Code: 60-110 ms here), and a copy taken before would
/// miss the turn, or the whole session on its first.
async fn settled(store: SessionStore, env: &BTreeMap<String, String>, workspace: &Path, id: &str) {
    let look = || {
        let files = store.session_files(env, workspace, id)?;
        let sizes: Vec<_> = files
            .names
            .iter()
            .map(|name| {
                let meta = std::fs::symlink_metadata(files.folder.join(name)).ok()?;
                Some((meta.len(), meta.modified().ok()?))
            })
            .collect();
        (!sizes.is_empty()).then_some(sizes)
    };
    let until = tokio::time::Instant::now() + SETTLE_AT_MOST;
    let (mut last, mut alike) = (look(), 0);
    while alike < QUIET_LOOKS && tokio::time::Instant::now() < until {
        tokio::time::sleep(LOOK_EVERY).await;
        let now = look();
        alike = if now.is_some() && now == last {
            alike + 1
        } else {
            0
        };
        last = now;
    }
}

/// Keep a copy of the turn's session files in the conversation's state,
/// once they have settled. A copy that cannot be kept is logged: the turn
/// itself is done.
pub(super) async fn keep(
    host: &dyn HostApi,
    scope: &RunScope,
    spec: &AdapterSpec,
    env: &BTreeMap<String, String>,
    workspace: &Path,
    id: &str,
    limit: u64,
) {
    // Nothing to wait for where the bridge cannot copy this harness's
    // sessions (no known store, or one outside the workspace).
    if scope.conversation_id.is_none()
        || folder_within(spec.session_store, env, workspace).is_none()
    {
        return;
    }
    settled(spec.session_store, env, workspace, id).await;
    // Reading up to the limit from disk: off the runtime's threads.
    let (store, harness) = (spec.session_store, spec.name.clone());
    let (env, workspace, id) = (env.clone(), workspace.to_path_buf(), id.to_string());
    let packed =
        tokio::task::spawn_blocking(move || pack(store, &harness, &env, &workspace, &id, limit))
            .await;
    let Ok(Some(copy)) = packed else {
        return;
    };
    if let Err(e) = host
        .state_set(scope, StateScope::Conversation, SESSION_FILES_KEY, &copy)
        .await
    {
        tracing::warn!("cannot keep the session's files for another instance: {e}");
    }
}

/// Write each file at its place below `workspace`, no link followed.
fn write_all(
    workspace: &Path,
    places: &[(PathBuf, Vec<u8>)],
    owner: Option<&'static crate::owner::Owner>,
) -> Result<(), NotFollowed> {
    let root = ConfinedDir::create(workspace, &[], owner)
        .map_err(|e| format!("the workspace cannot be written ({e})"))?;
    for (place, bytes) in places {
        let parts: Vec<&str> = place
            .iter()
            .map(|p| p.to_str())
            .collect::<Option<_>>()
            .ok_or("the workspace's path is not text")?;
        root.write(&parts, bytes)
            .map_err(|e| format!("its files could not be written here ({e})"))?;
    }
    Ok(())
}

/// Write the kept copy of `pointer`'s session into this workspace's home,
/// where `spec`'s harness looks for it. `Ok`: the pointer, now of this
/// workspace; `Err`: why the session cannot follow.
pub(super) async fn bring(
    host: &dyn HostApi,
    scope: &RunScope,
    spec: &AdapterSpec,
    env: &BTreeMap<String, String>,
    workspace: &Path,
    pointer: &ResumePointer,
    owner: Option<&'static crate::owner::Owner>,
) -> Result<ResumePointer, NotFollowed> {
    let store = spec.session_store;
    let below = folder_within(store, env, workspace)
        .ok_or_else(|| format!("{} keeps no session files the bridge can carry", spec.label))?;
    let copy = host
        .state_get(scope, StateScope::Conversation, SESSION_FILES_KEY)
        .await
        .map_err(|e| format!("its copy could not be read from the store ({e})"))?
        .ok_or("the instance that ran it kept no copy of it")?;
    let id = &pointer.session_id;
    if copy["harness"] != spec.name.as_str() || copy["session_id"] != id.as_str() {
        return Err("the copy kept is of another session".into());
    }
    if let Some(size) = copy["too_large"].as_u64() {
        return Err(format!(
            "it had grown to {:.1} MiB, more than the copy kept of a session",
            size as f64 / (1024.0 * 1024.0)
        ));
    }
    let files = copy["files"].as_array().map_or(&[][..], Vec::as_slice);
    if files.is_empty() {
        return Err("the copy kept holds no file".into());
    }
    // Every name checked and every file read before one is written.
    let mut places = Vec::with_capacity(files.len());
    for file in files {
        let name = file["name"].as_str().unwrap_or_default();
        if !store.takes_name(id, name) {
            tracing::warn!(file = %name.escape_debug(), "a kept session file's name is not one of the session's; nothing is written");
            return Err("the copy kept is not one of the harness's sessions".into());
        }
        let bytes = match (file["text"].as_str(), file["base64"].as_str()) {
            (Some(text), _) => text.as_bytes().to_vec(),
            (None, Some(b64)) => base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map_err(|_| "the copy kept is damaged".to_string())?,
            (None, None) => return Err("the copy kept is damaged".into()),
        };
        places.push((below.join(name), bytes));
    }
    let root = workspace.to_path_buf();
    let written = tokio::task::spawn_blocking(move || write_all(&root, &places, owner))
        .await
        .map_err(|e| format!("its files could not be written here ({e})"))?;
    written?;
    tracing::info!(
        harness = %spec.name,
        files = files.len(),
        "the conversation's session followed it from another instance"
    );
    Ok(ResumePointer {
        working_directory: workspace.to_string_lossy().into_owned(),
        ..pointer.clone()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::Adapters;
    use crate::host::sqlite::SqliteHost;

    /// A conversation's workspace with its home where the bridge puts it.
    fn home_env(workspace: &Path) -> BTreeMap<String, String> {
        let home = workspace.join(".langbot/home");
        BTreeMap::from([
            ("HOME".into(), home.display().to_string()),
            (
                "CLAUDE_CONFIG_DIR".into(),
                home.join(".claude").display().to_string(),
            ),
            (
                "CODEX_HOME".into(),
                home.join(".codex").display().to_string(),
            ),
        ])
    }

    fn scope() -> RunScope {
        RunScope {
            conversation_id: Some("moving".into()),
            ..RunScope::default()
        }
    }

    /// Bring `spec`'s session `id`, run in workspace `from`, to `to`.
    async fn moved(
        host: &dyn HostApi,
        spec: &AdapterSpec,
        from: &Path,
        to: &Path,
        id: &str,
    ) -> Result<ResumePointer, NotFollowed> {
        let pointer = ResumePointer {
            harness: spec.name.clone(),
            session_id: id.into(),
            working_directory: from.display().to_string(),
        };
        bring(host, &scope(), spec, &home_env(to), to, &pointer, None).await
    }

    const CLAUDE_ID: &str = "0b5d0c6e-8c1a-4c59-9b55-0a0e4c7c2a11";
    const CODEX_ID: &str = "019a0c6e-8c1a-7c59-9b55-0a0e4c7c2a11";

    #[tokio::test]
    async fn a_session_kept_on_one_instance_is_written_where_the_other_looks() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let store = tempfile::tempdir().unwrap();
        let sqlite = SqliteHost::open(store.path()).unwrap();
        let host: &dyn HostApi = &sqlite;
        let claude = Adapters::builtin().find("claude-code").unwrap();
        let codex = Adapters::builtin().find("codex").unwrap();
        let (env_a, env_b) = (home_env(a.path()), home_env(b.path()));

        // Claude Code: the folder is named after the working directory.
        let folder = claude.session_store.folder(&env_a, a.path()).unwrap();
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(folder.join(format!("{CLAUDE_ID}.jsonl")), "{\"turn\":1}\n").unwrap();
        keep(host, &scope(), claude, &env_a, a.path(), CLAUDE_ID, 1024).await;
        assert!(
            !claude
                .session_store
                .has_session(&env_b, b.path(), CLAUDE_ID)
        );
        let here = moved(host, claude, a.path(), b.path(), CLAUDE_ID)
            .await
            .unwrap();
        assert!(here.fits("claude-code", b.path()), "{here:?}");
        let there = claude.session_store.folder(&env_b, b.path()).unwrap();
        assert_eq!(
            std::fs::read_to_string(there.join(format!("{CLAUDE_ID}.jsonl"))).unwrap(),
            "{\"turn\":1}\n"
        );

        // Codex: a dated folder, the same below its home.
        let dated = a.path().join(".langbot/home/.codex/sessions/2026/11/29");
        std::fs::create_dir_all(&dated).unwrap();
        let rollout = format!("rollout-2026-11-29T10-00-00-{CODEX_ID}.jsonl");
        std::fs::write(dated.join(&rollout), [0xff, 0x00, b'\n']).unwrap();
        keep(host, &scope(), codex, &env_a, a.path(), CODEX_ID, 1024).await;
        let err = moved(host, claude, a.path(), b.path(), CLAUDE_ID)
            .await
            .unwrap_err();
        assert!(err.contains("another session"), "{err}");
        moved(host, codex, a.path(), b.path(), CODEX_ID)
            .await
            .unwrap();
        assert!(codex.session_store.has_session(&env_b, b.path(), CODEX_ID));
        let copied = b
            .path()
            .join(".langbot/home/.codex/sessions/2026/11/29")
            .join(&rollout);
        assert_eq!(
            std::fs::read(copied).unwrap(),
            [0xff, 0x00, b'\n'],
            "bytes, not text"
        );

        // Larger than the limit: a note, and the sentence on the other side.
        keep(host, &scope(), codex, &env_a, a.path(), CODEX_ID, 2).await;
        let err = moved(host, codex, a.path(), b.path(), CODEX_ID)
            .await
            .unwrap_err();
        assert!(err.contains("grown to"), "{err}");
    }

    #[tokio::test]
    async fn a_link_is_not_followed_and_a_copy_names_no_place_outside_the_store() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let elsewhere = tempfile::tempdir().unwrap();
        let store = tempfile::tempdir().unwrap();
        let sqlite = SqliteHost::open(store.path()).unwrap();
        let host: &dyn HostApi = &sqlite;
        let claude = Adapters::builtin().find("claude-code").unwrap();
        let env_a = home_env(a.path());

        // The harness made its session folder a link to another
        // conversation's: nothing of that one is copied.
        let folder = claude.session_store.folder(&env_a, a.path()).unwrap();
        std::fs::create_dir_all(folder.parent().unwrap()).unwrap();
        std::fs::write(
            elsewhere.path().join(format!("{CLAUDE_ID}.jsonl")),
            "theirs\n",
        )
        .unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), &folder).unwrap();
        keep(host, &scope(), claude, &env_a, a.path(), CLAUDE_ID, 1024).await;
        let kept = host
            .state_get(&scope(), StateScope::Conversation, SESSION_FILES_KEY)
            .await
            .unwrap();
        assert_eq!(kept, None, "a linked session is not copied");

        // A copy whose name walks out of the store writes nothing.
        for name in ["../../../escaped.jsonl", &format!("../x/{CLAUDE_ID}.jsonl")] {
            let forged = json!({"harness": "claude-code", "session_id": CLAUDE_ID,
                "files": [{"name": name, "text": "forged"}]});
            host.state_set(
                &scope(),
                StateScope::Conversation,
                SESSION_FILES_KEY,
                &forged,
            )
            .await
            .unwrap();
            let err = moved(host, claude, a.path(), b.path(), CLAUDE_ID)
                .await
                .unwrap_err();
            assert!(err.contains("not one of"), "{err}");
        }
        let written: Vec<_> = walkdir::WalkDir::new(b.path())
            .into_iter()
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_file())
            .map(|e| e.path().display().to_string())
            .collect();
        assert!(written.is_empty(), "{written:?}");
    }
}
