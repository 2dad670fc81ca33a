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
/// still exists before asking the harness to resume it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SessionStore {
    /// `$CLAUDE_CONFIG_DIR` (else `~/.claude`) `/projects/<cwd, every
    /// non-alphanumeric char as '-'>/<id>.jsonl`: found only from that cwd.
    ClaudeProjects,
    /// `$CODEX_HOME` (else `~/.codex`) `/sessions/YYYY/MM/DD/rollout-*-<id>.jsonl`.
    CodexSessions,
    /// Not checkable: try to resume and rely on "session not found".
    Unknown,
}

impl SessionStore {
    /// Whether session `id` exists for a harness run from `cwd` with `env`.
    pub fn has_session(self, env: &BTreeMap<String, String>, cwd: &Path, id: &str) -> bool {
        match self {
            SessionStore::Unknown => true,
            _ => self
                .session_files(env, cwd, id)
                .is_some_and(|files| !files.names.is_empty()),
        }
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
        let names = match self {
            SessionStore::ClaudeProjects => {
                let name = format!("{id}.jsonl");
                if folder.join(&name).is_file() {
                    vec![name]
                } else {
                    Vec::new()
                }
            }
            SessionStore::CodexSessions => {
                let suffix = format!("-{id}.jsonl");
                walkdir::WalkDir::new(folder.join("sessions"))
                    .max_depth(4)
                    .into_iter()
                    .filter_map(Result::ok)
                    .filter(|e| {
                        e.file_type().is_file()
                            && e.file_name().to_string_lossy().ends_with(&suffix)
                    })
                    .filter_map(|e| {
                        let name = e.path().strip_prefix(&folder).ok()?.to_str()?.to_string();
                        self.takes_name(id, &name).then_some(name)
                    })
                    .collect()
            }
            SessionStore::Unknown => Vec::new(),
        };
        Some(SessionFiles { folder, names })
    }

    /// The folder a harness run from `cwd` with `env` keeps its sessions
    /// under: Claude Code's folder for that cwd, Codex's home.
    pub fn folder(self, env: &BTreeMap<String, String>, cwd: &Path) -> Option<PathBuf> {
        let dir = |var: &str, default: &str| -> Option<PathBuf> {
            env.get(var)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
                .or_else(|| env.get("HOME").map(|h| Path::new(h).join(default)))
        };
        match self {
            SessionStore::ClaudeProjects => Some(
                dir("CLAUDE_CONFIG_DIR", ".claude")?
                    .join("projects")
                    .join(claude_project_folder(&cwd.to_string_lossy())),
            ),
            SessionStore::CodexSessions => dir("CODEX_HOME", ".codex"),
            SessionStore::Unknown => None,
        }
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
        if !parts.iter().all(|p| plain(p)) {
            return false;
        }
        match self {
            SessionStore::ClaudeProjects => parts == [format!("{id}.jsonl").as_str()],
            SessionStore::CodexSessions => match parts.as_slice() {
                ["sessions", year, month, day, file] => {
                    [year, month, day]
                        .iter()
                        .all(|d| d.bytes().all(|b| b.is_ascii_digit()))
                        && file.starts_with("rollout-")
                        && file.ends_with(&format!("-{id}.jsonl"))
                }
                _ => false,
            },
            SessionStore::Unknown => false,
        }
    }
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

/// Claude Code's folder name for a working directory: every character
/// that is not an ASCII letter or digit becomes `-`; a name longer than 200
/// characters is cut to 200 and followed by `-` and a base-36 hash of the
/// path (a JavaScript string hash: `h = h * 31 + code unit`, in i32).
fn claude_project_folder(cwd: &str) -> String {
    const MAX: usize = 200;
    let slug: String = cwd
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    if slug.len() <= MAX {
        return slug;
    }
    let hash = cwd.encode_utf16().fold(0i32, |h, unit| {
        h.wrapping_shl(5)
            .wrapping_sub(h)
            .wrapping_add(i32::from(unit))
    });
    let mut n = i64::from(hash).unsigned_abs();
    let mut digits = Vec::new();
    loop {
        digits.push(char::from_digit((n % 36) as u32, 36).unwrap_or('0'));
        n /= 36;
        if n == 0 {
            break;
        }
    }
    let hash: String = digits.iter().rev().collect();
    format!("{}-{hash}", &slug[..MAX])
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

    fn env(key: &str, dir: &Path) -> BTreeMap<String, String> {
        BTreeMap::from([(key.to_string(), dir.to_string_lossy().into_owned())])
    }

    #[test]
    fn claude_sessions_are_found_only_under_their_cwd() {
        let config = tempfile::tempdir().unwrap();
        let cwd = Path::new("/tmp/ws/bot_1/conv.a");
        let folder = config.path().join("projects/-tmp-ws-bot-1-conv-a");
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(folder.join("abc-123.jsonl"), "{}\n").unwrap();
        let env = env("CLAUDE_CONFIG_DIR", config.path());
        let store = SessionStore::ClaudeProjects;
        assert!(store.has_session(&env, cwd, "abc-123"));
        assert!(!store.has_session(&env, Path::new("/tmp/other"), "abc-123"));
        assert!(!store.has_session(&env, cwd, "gone"));
        assert!(!store.has_session(&env, cwd, "../abc-123"));
    }

    #[test]
    fn long_claude_folders_are_cut_and_hashed() {
        let short = "/tmp/ws/conv";
        assert_eq!(claude_project_folder(short), "-tmp-ws-conv");
        let long = format!("/{}", "a".repeat(250));
        let folder = claude_project_folder(&long);
        assert!(folder.starts_with(&format!("-{}", "a".repeat(199))));
        assert_eq!(&folder[200..201], "-");
        assert!(folder[201..].chars().all(|c| c.is_ascii_alphanumeric()));
        // The same path always gives the same folder; another path another.
        assert_eq!(folder, claude_project_folder(&long));
        assert_ne!(folder, claude_project_folder(&format!("{long}b")));
    }

    #[test]
    fn codex_rollouts_are_found_by_thread_id() {
        let home = tempfile::tempdir().unwrap();
        let day = home.path().join("sessions/2026/11/22");
        std::fs::create_dir_all(&day).unwrap();
        std::fs::write(day.join("rollout-2026-11-22T10-00-00-th-9.jsonl"), "").unwrap();
        let env = env("CODEX_HOME", home.path());
        let store = SessionStore::CodexSessions;
        assert!(store.has_session(&env, Path::new("/any"), "th-9"));
        assert!(!store.has_session(&env, Path::new("/any"), "th-8"));
    }

    #[test]
    fn a_carried_file_may_only_take_a_name_of_its_sessions() {
        let claude = SessionStore::ClaudeProjects;
        assert!(claude.takes_name("s-1", "s-1.jsonl"));
        for name in ["s-2.jsonl", "../s-1.jsonl", "x/s-1.jsonl", "s-1.jsonl/", ""] {
            assert!(!claude.takes_name("s-1", name), "{name}");
        }
        let codex = SessionStore::CodexSessions;
        assert!(codex.takes_name(
            "th-9",
            "sessions/2026/11/22/rollout-2026-11-22T10-00-00-th-9.jsonl"
        ));
        for name in [
            "sessions/2026/11/22/rollout-x-th-8.jsonl",
            "sessions/2026/../22/rollout-x-th-9.jsonl",
            "sessions/2026/11/rollout-x-th-9.jsonl",
            "config.toml",
            "sessions/2026/11/22/../../../../auth.json",
        ] {
            assert!(!codex.takes_name("th-9", name), "{name}");
        }
        assert!(!SessionStore::Unknown.takes_name("s-1", "s-1.jsonl"));
    }

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
