//! Where Codex keeps its sessions: `$CODEX_HOME` (else `~/.codex`)
//! `/sessions/YYYY/MM/DD/rollout-*-<id>.jsonl`, found by thread id alone
//! (so a pointer must also name its working directory).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::harness::SessionStore;
use crate::harness::session::home_folder;

/// The store.
pub const STORE: SessionStore = SessionStore {
    name: "codex-sessions",
    folder,
    find,
    names,
};

fn folder(env: &BTreeMap<String, String>, _cwd: &Path) -> Option<PathBuf> {
    home_folder(env, "CODEX_HOME", ".codex")
}

fn find(folder: &Path, id: &str) -> Vec<String> {
    let suffix = format!("-{id}.jsonl");
    walkdir::WalkDir::new(folder.join("sessions"))
        .max_depth(4)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file() && e.file_name().to_string_lossy().ends_with(&suffix))
        .filter_map(|e| Some(e.path().strip_prefix(folder).ok()?.to_str()?.to_string()))
        .collect()
}

fn names(id: &str, parts: &[&str]) -> bool {
    match parts {
        ["sessions", year, month, day, file] => {
            [year, month, day]
                .iter()
                .all(|d| d.bytes().all(|b| b.is_ascii_digit()))
                && file.starts_with("rollout-")
                && file.ends_with(&format!("-{id}.jsonl"))
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codex_rollouts_are_found_by_thread_id() {
        let home = tempfile::tempdir().unwrap();
        let day = home.path().join("sessions/2026/11/22");
        std::fs::create_dir_all(&day).unwrap();
        std::fs::write(day.join("rollout-2026-11-22T10-00-00-th-9.jsonl"), "").unwrap();
        let env = BTreeMap::from([(
            "CODEX_HOME".to_string(),
            home.path().to_string_lossy().into_owned(),
        )]);
        assert!(STORE.has_session(&env, Path::new("/any"), "th-9"));
        assert!(!STORE.has_session(&env, Path::new("/any"), "th-8"));
    }

    #[test]
    fn a_carried_file_may_only_take_a_name_of_its_sessions() {
        assert!(STORE.takes_name(
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
            assert!(!STORE.takes_name("th-9", name), "{name}");
        }
    }
}
