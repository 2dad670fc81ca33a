//! Resume pointers: which external session a conversation continues, and
//! whether that session is still there to continue.
//!
//! The pointer lives with the host (conversation state), never in the
//! bridge alone, so whichever bridge process handles the next turn finds
//! it. Before resuming, the harness's own session store is checked: a
//! missing session means a fresh one, not a failed turn.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use crate::protocol::JsonMap;

/// State key of the external session id.
pub const SESSION_ID_KEY: &str = "external.session_id";
/// State key of the working directory the session belongs to.
pub const WORKING_DIRECTORY_KEY: &str = "external.working_directory";
/// State key of the harness that owns the session.
pub const HARNESS_KEY: &str = "external.harness";
/// State key of a copy of the session's own files, kept on a shared store
/// so the session can follow its conversation to another instance.
pub const SESSION_FILES_KEY: &str = "external.session_files";

/// State key of the conversation's earlier sessions (`/new` puts the
/// current one there, `/resume N` brings one back), newest first.
pub const EARLIER_SESSIONS_KEY: &str = "external.sessions";
/// State key of the model and permission mode a person chose for the
/// conversation (`/model`, `/mode`), among those the operator allows.
pub const OVERRIDES_KEY: &str = "external.overrides";

/// Where a harness keeps its sessions, so the bridge can tell whether one
/// still exists before asking the harness to resume it. A family's store
/// is declared in its folder (`harness/families/<name>/session.rs`).
#[derive(Clone, Copy)]
pub struct SessionStore {
    /// The name a spec's `session_store:` gives it.
    pub name: &'static str,
    /// The folder a harness run from `cwd` with `env` keeps its sessions
    /// under; `None` where it cannot be known.
    pub folder: fn(env: &BTreeMap<String, String>, cwd: &Path) -> Option<PathBuf>,
    /// The files of session `id` below `folder`, `/`-separated; each
    /// is one [`SessionStore::takes_name`] takes.
    pub find: fn(folder: &Path, id: &str) -> Vec<String>,
    /// Whether a name's parts (each a plain component) name a file of
    /// session `id`.
    pub names: fn(id: &str, parts: &[&str]) -> bool,
}

impl SessionStore {
    /// Not checkable: try to resume and rely on "session not found".
    pub const UNKNOWN: SessionStore = SessionStore {
        name: "unknown",
        folder: |_, _| None,
        find: |_, _| Vec::new(),
        names: |_, _| false,
    };

    /// Whether session `id` exists for a harness run from `cwd` with `env`.
    pub fn has_session(self, env: &BTreeMap<String, String>, cwd: &Path, id: &str) -> bool {
        if self == SessionStore::UNKNOWN {
            return true;
        }
        self.session_files(env, cwd, id)
            .is_some_and(|files| !files.names.is_empty())
    }

    /// Session `id`'s files, as a harness run from `cwd` with `env` keeps
    /// them; `None` where the store is not known (or has no folder).
    pub fn session_files(
        self,
        env: &BTreeMap<String, String>,
        cwd: &Path,
        id: &str,
    ) -> Option<SessionFiles> {
        let folder = self.folder(env, cwd)?;
        // An id from state is data: it must not walk out of the store.
        if id.is_empty() || id.contains(['/', '\\']) || id.starts_with('.') {
            return Some(SessionFiles {
                folder,
                names: Vec::new(),
            });
        }
        let names = (self.find)(&folder, id)
            .into_iter()
            .filter(|name| self.takes_name(id, name))
            .collect();
        Some(SessionFiles { folder, names })
    }

    /// The folder a harness run from `cwd` with `env` keeps its sessions
    /// under (Claude Code's folder for that cwd, Codex's home).
    pub fn folder(self, env: &BTreeMap<String, String>, cwd: &Path) -> Option<PathBuf> {
        (self.folder)(env, cwd)
    }

    /// Whether `name` (below [`SessionStore::folder`], `/`-separated) is a
    /// name a file of session `id` has in this store. Files carried from
    /// elsewhere name their own place: the name is checked, never trusted.
    pub fn takes_name(self, id: &str, name: &str) -> bool {
        let plain = |part: &str| {
            !part.is_empty()
                && part != "."
                && part != ".."
                && !part.contains('\\')
                && !part.contains('\0')
        };
        let parts: Vec<&str> = name.split('/').collect();
        parts.iter().all(|p| plain(p)) && (self.names)(id, &parts)
    }
}

by_name!(SessionStore);

/// A harness's folder from `env`: the variable `var` where set, else
/// `default` in `HOME` (`$CODEX_HOME`, else `~/.codex`).
pub fn home_folder(env: &BTreeMap<String, String>, var: &str, default: &str) -> Option<PathBuf> {
    env.get(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| env.get("HOME").map(|h| Path::new(h).join(default)))
}

/// Where a session's files are: the store's folder, and their names
/// below it (`/`-separated).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionFiles {
    /// [`SessionStore::folder`].
    pub folder: PathBuf,
    /// The files of the session, none when it is not there.
    pub names: Vec<String>,
}

/// What a harness's session ids look like. A stored pointer is data that
/// anyone who can write the conversation's state may have changed: an id
/// that does not look like one the harness gives is never passed to it
/// (it would otherwise reach the harness's command line).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SessionIdFormat {
    /// A UUID in its usual text form (Claude Code sessions, Codex threads).
    Uuid,
    /// 1 to 128 letters, digits and `. _ : -`, not starting with `-`.
    #[default]
    Token,
}

impl SessionIdFormat {
    /// Whether `id` is a session id of this form.
    pub fn accepts(self, id: &str) -> bool {
        match self {
            SessionIdFormat::Uuid => {
                let groups: Vec<&str> = id.split('-').collect();
                groups.len() == 5
                    && groups
                        .iter()
                        .zip([8, 4, 4, 4, 12])
                        .all(|(g, len)| g.len() == len && g.bytes().all(|b| b.is_ascii_hexdigit()))
            }
            SessionIdFormat::Token => {
                (1..=128).contains(&id.len())
                    && !id.starts_with(['-', '.'])
                    && id
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"._:-".contains(&b))
            }
        }
    }

    /// The form, as a sentence fragment for notices.
    pub fn describe(self) -> &'static str {
        match self {
            SessionIdFormat::Uuid => "a UUID",
            SessionIdFormat::Token => {
                "1-128 letters, digits and . _ : - (not starting with - or .)"
            }
        }
    }
}

/// The external session a conversation continues.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResumePointer {
    /// The harness that owns the session.
    pub harness: String,
    /// The harness's session (Claude) or thread (Codex) id.
    pub session_id: String,
    /// The workspace the session was run in.
    pub working_directory: String,
}

impl ResumePointer {
    /// The state keys a pointer is stored under.
    pub const KEYS: [&'static str; 3] = [SESSION_ID_KEY, WORKING_DIRECTORY_KEY, HARNESS_KEY];

    /// Read a pointer from state entries (`external.*` keys); `None` when
    /// the session id is missing or not a string.
    pub fn from_state(get: impl Fn(&str) -> Option<Value>) -> Option<Self> {
        let text = |key| get(key).and_then(|v| v.as_str().map(str::to_string));
        Some(ResumePointer {
            session_id: text(SESSION_ID_KEY).filter(|s| !s.is_empty())?,
            harness: text(HARNESS_KEY).unwrap_or_default(),
            working_directory: text(WORKING_DIRECTORY_KEY).unwrap_or_default(),
        })
    }

    /// Read a pointer from a context's `state.conversation` object.
    pub fn from_map(map: &JsonMap) -> Option<Self> {
        Self::from_state(|key| map.get(key).cloned())
    }

    /// The state entries that store this pointer, in a fixed order.
    pub fn entries(&self) -> [(&'static str, Value); 3] {
        [
            (SESSION_ID_KEY, Value::String(self.session_id.clone())),
            (
                WORKING_DIRECTORY_KEY,
                Value::String(self.working_directory.clone()),
            ),
            (HARNESS_KEY, Value::String(self.harness.clone())),
        ]
    }

    /// Whether a turn of `harness` in `cwd` may resume this session: the
    /// same harness in the same working directory. A pointer without its
    /// directory fits nowhere: a session store searched by id alone (Codex)
    /// would otherwise resume another conversation's session.
    pub fn fits(&self, harness: &str, cwd: &Path) -> bool {
        self.harness == harness && Path::new(&self.working_directory) == cwd
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pointers_round_trip_through_state_and_check_their_harness() {
        let pointer = ResumePointer {
            harness: "codex".into(),
            session_id: "th-1".into(),
            working_directory: "/w/c".into(),
        };
        let map: JsonMap = pointer
            .entries()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        assert_eq!(ResumePointer::from_map(&map), Some(pointer.clone()));
        assert!(pointer.fits("codex", Path::new("/w/c")));
        assert!(!pointer.fits("claude-code", Path::new("/w/c")));
        assert!(!pointer.fits("codex", Path::new("/w/other")));
        let placeless = ResumePointer {
            working_directory: String::new(),
            ..pointer.clone()
        };
        assert!(!placeless.fits("codex", Path::new("/w/c")));
        let bad: JsonMap = serde_json::from_value(json!({"external.session_id": 7})).unwrap();
        assert_eq!(ResumePointer::from_map(&bad), None);
    }
}
