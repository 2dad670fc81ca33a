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
use super::record::write_bytes_replacing;
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

/// The ref a private repository holds the commit being taken in under.
pub(super) const TURN_REF: &str = "refs/heads/turn";

/// The configuration of every private repository of the project at
/// `common_dir`, from its own configuration file (its includes not
/// followed): the [`TAKEN`] settings whose values are plain words.
pub(super) async fn config_for(common_dir: &std::path::Path) -> Result<String, GitError> {
    let file = common_dir.join("config");
    let file = file.to_string_lossy();
    let listed = Git::bare(common_dir)
        .run(&["config", "--file", &file, "--list", "-z"])
        .await?;
    Ok(render(&listed))
}

/// `git config --list -z` (`key\nvalue\0`…) → the private configuration.
fn render(listed: &[u8]) -> String {
    let plain = |v: &str| {
        !v.is_empty()
            && v.len() <= 64
            && v.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    };
    let mut core = String::new();
    let mut extensions = String::new();
    for entry in listed.split(|b| *b == 0) {
        let entry = String::from_utf8_lossy(entry);
        let (key, value) = entry.split_once('\n').unwrap_or((&entry, "true"));
        if !TAKEN.contains(&key) || !plain(value) {
            continue;
        }
        let (section, name) = key.split_once('.').unwrap_or(("", key));
        let out = match section {
            "core" => &mut core,
            _ => &mut extensions,
        };
        out.push_str(&format!("\t{name} = {value}\n"));
    }
    let version = if extensions.is_empty() { 0 } else { 1 };
    let mut text = format!(
        "[core]\n\trepositoryformatversion = {version}\n\tbare = true\n\tlogallrefupdates = false\n{core}"
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

    /// git on the bridge's repository for this worktree: its objects (the
    /// repository's among them) and the ref being taken in.
    pub(super) fn own_git(&self) -> Git {
        Git::bare(&self.private_dir())
    }

    /// The same, reading the worktree's files.
    pub(super) fn worktree_git(&self) -> Git {
        self.own_git().with_work_tree(&self.work_tree)
    }

    /// The bridge's repository for this worktree made, or made as it must
    /// be: its configuration, its way to the repository's objects, the
    /// repository's exclude file and shallow commits. Only files that
    /// differ are written.
    pub(super) fn ready_private(&self) -> Result<(), ProjectError> {
        let dir = self.private_dir();
        let fail = |e: std::io::Error| {
            self.fail(format!(
                "cannot make the bridge's repository for the worktree: {e}"
            ))
        };
        for sub in [
            "objects/info",
            "objects/pack",
            "refs/heads",
            "refs/tags",
            "info",
        ] {
            std::fs::create_dir_all(dir.join(sub)).map_err(fail)?;
        }
        let alternates = format!("{}\n", self.common_dir.join("objects").display());
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
                write_bytes_replacing(&path, bytes).map_err(fail)?;
            }
        }
        // A shallow repository's boundary, so history stops where it does.
        let shallow = dir.join("shallow");
        match std::fs::read(self.common_dir.join("shallow")) {
            Ok(bytes) if std::fs::read(&shallow).ok() != Some(bytes.clone()) => {
                write_bytes_replacing(&shallow, &bytes).map_err(fail)?
            }
            Ok(_) => {}
            Err(_) => super::own::remove_if_there(&shallow).map_err(fail)?,
        }
        Ok(())
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
            include.path\n/tmp/evil.inc\0core.eol\ncrlf; rm -rf /\0core.symlinks\0";
        let text = render(listed);
        assert_eq!(
            text,
            "[core]\n\trepositoryformatversion = 1\n\tbare = true\n\tlogallrefupdates = false\n\
             \tautocrlf = input\n\tfilemode = false\n\tsymlinks = true\n\
             [extensions]\n\tobjectformat = sha256\n[gc]\n\tauto = 0\n[maintenance]\n\tauto = false\n"
        );
        assert!(!render(b"").contains("[extensions]"));
    }
}
