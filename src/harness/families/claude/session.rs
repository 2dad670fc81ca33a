//! Where Claude Code keeps its sessions: `$CLAUDE_CONFIG_DIR` (else
//! `~/.claude`) `/projects/<cwd, every non-alphanumeric char as
//! '-'>/<id>.jsonl`, so a session is found only from its cwd.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::harness::SessionStore;
use crate::harness::session::home_folder;

/// The store (Qwen Code keeps its own elsewhere, unchecked).
pub const STORE: SessionStore = SessionStore {
    name: "claude-projects",
    folder,
    find,
    names,
};

fn folder(env: &BTreeMap<String, String>, cwd: &Path) -> Option<PathBuf> {
    Some(
        home_folder(env, "CLAUDE_CONFIG_DIR", ".claude")?
            .join("projects")
            .join(claude_project_folder(&cwd.to_string_lossy())),
    )
}

fn find(folder: &Path, id: &str) -> Vec<String> {
    let name = format!("{id}.jsonl");
    if folder.join(&name).is_file() {
        vec![name]
    } else {
        Vec::new()
    }
}

fn names(id: &str, parts: &[&str]) -> bool {
    parts == [format!("{id}.jsonl").as_str()]
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

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(STORE.has_session(&env, cwd, "abc-123"));
        assert!(!STORE.has_session(&env, Path::new("/tmp/other"), "abc-123"));
        assert!(!STORE.has_session(&env, cwd, "gone"));
        assert!(!STORE.has_session(&env, cwd, "../abc-123"));
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
    fn a_carried_file_may_only_take_the_name_of_its_session() {
        assert!(STORE.takes_name("s-1", "s-1.jsonl"));
        for name in ["s-2.jsonl", "../s-1.jsonl", "x/s-1.jsonl", "s-1.jsonl/", ""] {
            assert!(!STORE.takes_name("s-1", name), "{name}");
        }
        assert!(!SessionStore::UNKNOWN.takes_name("s-1", "s-1.jsonl"));
    }
}
