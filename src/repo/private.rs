//! The bridge's own repository for each worktree
//! (`harness-bridge/<record>.git` in the repository's git folder, which
//! harnesses may read but never write): every git call of the bridge's
//! that reads a worktree's files or a harness's commits runs there.
//!
//! Its configuration is the bridge's, written whole: the few settings of
//! the operator's repository that change how files are read (line
//! endings, file modes, links, case, the object format) and nothing that
//! names a program — no filter, diff or merge driver, signature program,
//! include, hook path, credential helper or transport. Its objects are
//! what the bridge wrote for the worktree (the snapshots of its files, a
//! put-away's commit, the harness's objects once copied in through
//! [`super::intake`]), with the repository's to read; its exclude file is
//! the repository's. So what a harness plants in its worktree's record,
//! or names in the worktree's `.gitattributes`, is never read by a git of
//! the bridge's, and no program runs.

use std::path::PathBuf;

use super::git::{Git, GitError};
use super::worktree::{Reader, write_replacing};
use super::{Checkout, ProjectError};

/// The operator's settings a private repository takes: how files are
/// read and objects named, never what runs. Keys as `git config --list`
/// gives them (lowercase).
const TAKEN: &[&str] = &[
    "core.autocrlf",
    "core.eol",
    "core.safecrlf",
    "core.filemode",
    "core.symlinks",
    "core.ignorecase",
    "core.precomposeunicode",
    "core.checkroundtripencoding",
    "core.bigfilethreshold",
    "core.compression",
    "core.loosecompression",
    "extensions.objectformat",
];

/// The operator's settings naming a file (what git leaves out, how it
/// reads attributes), taken when they are absolute paths of plain
/// characters.
const TAKEN_PATHS: &[&str] = &["core.excludesfile", "core.attributesfile"];

/// Past this, the objects of a worktree's snapshots no longer needed (of
/// files changed again, or gone, before anyone committed them) are
/// pruned from the bridge's repository for it.
const PRUNE_PAST_BYTES: u64 = 64 * 1024 * 1024;

/// The ref that holds the tree the last turn left, while the bridge's
/// repository for a worktree is pruned.
const KEPT_REF: &str = "refs/kept";

/// The ref a private repository holds the commit being taken in under.
pub(super) const TURN_REF: &str = "refs/heads/turn";

/// What the bridge reads of a repository's own configuration file (its
/// includes not followed).
#[derive(Debug)]
pub(super) struct RepoConfig {
    /// The configuration of every private repository of the project: the
    /// [`TAKEN`] settings whose values are plain words, the
    /// [`TAKEN_PATHS`] that are plain absolute paths.
    pub private: String,
    /// Whether it is a partial clone, whose missing objects only a fetch
    /// from its remote would bring: a worktree needs them all.
    pub partial: bool,
    /// The keys that hold credentials, which every conversation's agent
    /// of the project can read (it reads the repository's git folder).
    pub credentials: Vec<String>,
}

/// The configuration file of the repository at `common_dir`, read.
pub(super) async fn read_config(common_dir: &std::path::Path) -> Result<RepoConfig, GitError> {
    let file = common_dir.join("config");
    let file = file.to_string_lossy();
    let listed = Git::bare(common_dir)
        .run(&["config", "--file", &file, "--list", "-z"])
        .await?;
    let entries: Vec<(String, String)> = listed
        .split(|b| *b == 0)
        .filter(|entry| !entry.is_empty())
        .map(|entry| {
            let entry = String::from_utf8_lossy(entry);
            match entry.split_once('\n') {
                Some((key, value)) => (key.to_string(), value.to_string()),
                None => (entry.to_string(), "true".to_string()),
            }
        })
        .collect();
    let mut credentials: Vec<String> = entries
        .iter()
        .filter(|(key, value)| super::remote::holds_credential(key, value))
        .map(|(key, _)| key.clone())
        .collect();
    credentials.dedup();
    Ok(RepoConfig {
        private: render(&listed),
        partial: entries
            .iter()
            .any(|(key, _)| key == "extensions.partialclone"),
        credentials,
    })
}

/// `git config --list -z` (`key\nvalue\0`…) → the private configuration.
fn render(listed: &[u8]) -> String {
    let plain = |v: &str| {
        !v.is_empty()
            && v.len() <= 64
            && v.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    };
    let path = |v: &str| {
        v.starts_with('/')
            && v.len() <= 4096
            && v.bytes()
                .all(|b| b.is_ascii_graphic() && !matches!(b, b'"' | b'\\'))
    };
    let mut core = String::new();
    let mut extensions = String::new();
    for entry in listed.split(|b| *b == 0) {
        let entry = String::from_utf8_lossy(entry);
        let (key, value) = entry.split_once('\n').unwrap_or((&entry, "true"));
        let value = match (TAKEN.contains(&key), TAKEN_PATHS.contains(&key)) {
            (true, _) if plain(value) => value.to_string(),
            (_, true) if path(value) => format!("\"{value}\""),
            _ => continue,
        };
        let (section, name) = key.split_once('.').unwrap_or(("", key));
        let out = match section {
            "core" => &mut core,
            _ => &mut extensions,
        };
        out.push_str(&format!("\t{name} = {value}\n"));
    }
    let version = if extensions.is_empty() { 0 } else { 1 };
    // A file given to the harness's user changes its time of change, not
    // what it holds: the bridge's index goes on trusting what it saw.
    let mut text = format!(
        "[core]\n\trepositoryformatversion = {version}\n\tbare = true\n\tlogallrefupdates = false\n\
         \ttrustctime = false\n{core}"
    );
    if !extensions.is_empty() {
        text.push_str("[extensions]\n");
        text.push_str(&extensions);
    }
    text.push_str("[gc]\n\tauto = 0\n[maintenance]\n\tauto = false\n");
    text
}

impl Checkout {
    /// The bridge's repository for this worktree.
    pub(super) fn private_dir(&self) -> PathBuf {
        let name = self.admin.file_name().unwrap_or_default();
        self.own_dir().join(name).with_extension("git")
    }

    /// What the bridge keeps for this worktree outside it: its own
    /// repository (the snapshots of the worktree's files), which counts
    /// toward the conversation's disk.
    pub fn kept_elsewhere(&self) -> Vec<PathBuf> {
        vec![self.private_dir()]
    }

    /// How many bytes an object id of the project's repository takes.
    pub(super) fn hash_len(&self) -> usize {
        match self.private_config.contains("objectformat = sha256") {
            true => 32,
            false => 20,
        }
    }

    /// git on the bridge's repository for this worktree: its objects (the
    /// repository's among them) and the ref being taken in.
    pub(super) fn own_git(&self) -> Git {
        Git::bare(&self.private_dir())
    }

    /// The same, reading the worktree's files.
    pub(super) fn worktree_git(&self) -> Git {
        self.own_git().with_work_tree(&self.work_tree)
    }

    /// Once the bridge's repository for this worktree holds more than
    /// [`PRUNE_PAST_BYTES`]: every object of its snapshots but those of
    /// `kept` (the tree the last turn left, which the bridge's index
    /// holds) pruned. Whatever was never committed goes with the
    /// snapshots that held it; the repository's own objects are not
    /// touched.
    pub(super) async fn prune_snapshots(
        &self,
        kept: &str,
        always: bool,
    ) -> Result<(), ProjectError> {
        let objects = self.private_dir().join("objects");
        let held =
            tokio::task::spawn_blocking(move || crate::disk::used(&[objects], PRUNE_PAST_BYTES))
                .await
                .unwrap_or(0);
        if held <= PRUNE_PAST_BYTES && !always {
            return Ok(());
        }
        let git = self.own_git().with_index(&self.own_index_path());
        git.run(&["update-ref", KEPT_REF, kept])
            .await
            .map_err(|e| self.at_git(e))?;
        git.run(&["prune", "--expire=now"])
            .await
            .map_err(|e| self.at_git(e))?;
        tracing::info!(project = %self.project, branch = %self.branch, "snapshots of files nobody committed are pruned");
        Ok(())
    }

    /// Every snapshot of the worktree's files but the last turn's let go
    /// now, whatever they hold (once the last turn's is kept): a
    /// conversation over its disk limit is not held there by files it
    /// removed.
    pub async fn release_snapshots(&self) {
        self.kept().await;
        let Some(kept) = self.kept_state() else {
            return;
        };
        if let Err(e) = self.prune_snapshots(&kept.tree, true).await {
            tracing::warn!(error = %e, "cannot prune the snapshots of the worktree");
        }
    }

    /// The bridge's repository for this worktree made, or made as it must
    /// be: its configuration, its way to the repository's objects, the
    /// repository's exclude file and shallow commits. Only files that
    /// differ are written.
    pub(super) fn ready_private(&self) -> Result<(), ProjectError> {
        let alternates = [self.common_dir.join("objects")];
        self.make_repo(&self.private_dir(), &alternates)
            .map_err(|e| {
                self.fail(format!(
                    "cannot make the bridge's repository for the worktree: {e}"
                ))
            })
    }

    /// An intake repository, made afresh (see [`super::intake`]): beside
    /// the bridge's own for the worktree, reading its objects and the
    /// repository's.
    pub(super) fn fresh_intake(&self) -> Result<PathBuf, ProjectError> {
        let dir = self.private_dir().with_extension("intake");
        let fail = |e: std::io::Error| self.fail(format!("cannot make an intake repository: {e}"));
        remove_repo(&dir).map_err(fail)?;
        let alternates = [
            self.private_dir().join("objects"),
            self.common_dir.join("objects"),
        ];
        self.make_repo(&dir, &alternates).map_err(fail)?;
        Ok(dir)
    }

    /// A bare repository at `dir` in the bridge's shape: its HEAD on
    /// [`TURN_REF`], the bridge's configuration, `alternates` to read, the
    /// repository's exclude file and shallow commits.
    fn make_repo(&self, dir: &std::path::Path, alternates: &[PathBuf]) -> std::io::Result<()> {
        for sub in [
            "objects/info",
            "objects/pack",
            "refs/heads",
            "refs/tags",
            "info",
        ] {
            std::fs::create_dir_all(dir.join(sub))?;
        }
        let alternates: String = alternates
            .iter()
            .map(|dir| format!("{}\n", dir.display()))
            .collect();
        let exclude =
            std::fs::read(self.common_dir.join("info").join("exclude")).unwrap_or_default();
        let head = format!("ref: {TURN_REF}\n");
        let files: [(&str, &[u8]); 4] = [
            ("HEAD", head.as_bytes()),
            ("config", self.private_config.as_bytes()),
            ("objects/info/alternates", alternates.as_bytes()),
            ("info/exclude", &exclude),
        ];
        for (name, bytes) in files {
            let path = dir.join(name);
            if std::fs::read(&path).ok().as_deref() != Some(bytes) {
                write_replacing(&path, bytes, Reader::Bridge)?;
            }
        }
        // A shallow repository's boundary, so history stops where it does.
        let shallow = dir.join("shallow");
        match std::fs::read(self.common_dir.join("shallow")) {
            Ok(bytes) if std::fs::read(&shallow).ok() != Some(bytes.clone()) => {
                write_replacing(&shallow, &bytes, Reader::Bridge)
            }
            Ok(_) => Ok(()),
            Err(_) => super::worktree::remove_if_there(&shallow),
        }
    }
}

/// Remove the repository folder `dir`, if there is one (a link there is
/// removed, never followed).
pub(super) fn remove_repo(dir: &std::path::Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(dir) {
        Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(dir),
        Ok(_) => std::fs::remove_file(dir),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_private_configuration_takes_how_files_are_read_and_nothing_that_runs() {
        let listed = b"core.repositoryformatversion\n1\0core.autocrlf\ninput\0\
            core.fsmonitor\n/tmp/evil\0filter.lfs.clean\ngit-lfs clean -- %f\0\
            core.filemode\nfalse\0extensions.objectformat\nsha256\0\
            include.path\n/tmp/evil.inc\0core.eol\ncrlf; rm -rf /\0core.symlinks\0\
            core.excludesfile\n/srv/ignore\0core.attributesfile\n~/attrs\0";
        let text = render(listed);
        assert_eq!(
            text,
            "[core]\n\trepositoryformatversion = 1\n\tbare = true\n\tlogallrefupdates = false\n\
             \ttrustctime = false\n\
             \tautocrlf = input\n\tfilemode = false\n\tsymlinks = true\n\
             \texcludesfile = \"/srv/ignore\"\n\
             [extensions]\n\tobjectformat = sha256\n[gc]\n\tauto = 0\n[maintenance]\n\tauto = false\n"
        );
        assert!(!render(b"").contains("[extensions]"));
    }
}
