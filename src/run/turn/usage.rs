//! Token counts a harness writes to a file rather than its stream (Copilot
//! CLI's `--usage-output-file`): read around the turn, as its family says.

use crate::harness::families::UsageFile;
use crate::projection::{ConfinedDir, paths};
use crate::protocol::TokenUsage;

/// A harness's usage file as the last turn left it (then removed, so a
/// turn that writes none reports none rather than the last one's).
pub(in crate::run) struct UsageCount(Option<serde_json::Value>);

/// Most of a usage file read: it is the harness's, in its workspace.
const MAX_USAGE_FILE: u64 = 1024 * 1024;

impl UsageCount {
    fn read(dir: &ConfinedDir) -> Option<serde_json::Value> {
        let relative = paths::USAGE.join("/");
        let head = dir
            .read_head(std::path::Path::new(&relative), MAX_USAGE_FILE)
            .ok()?;
        serde_json::from_slice(&head.bytes).ok()
    }

    pub(in crate::run) fn before(dir: &ConfinedDir) -> UsageCount {
        let before = UsageCount::read(dir);
        if let Err(e) = dir.remove(&paths::USAGE) {
            tracing::warn!(error = %e, "cannot clear the harness's usage file");
        }
        UsageCount(before)
    }

    pub(in crate::run) fn after(self, file: UsageFile, dir: &ConfinedDir) -> Option<TokenUsage> {
        file.usage(self.0.as_ref(), &UsageCount::read(dir)?)
    }
}
