//! Projects: a chat bound to a code repository.
//!
//! The operator declares projects by name (`bridge.yaml`'s `projects`, or
//! the LangBot plugin's settings, which the relay's run frames carry and
//! [`OpenedProjects`] keeps); a binding picks one (`project: web`), as it picks MCP servers, and can
//! never name a path. Each conversation of a project works in a git
//! worktree of its own on a branch of its own ([`Checkout`]), created from
//! the base branch on its first turn and kept across turns; what a turn
//! changed there is summed up for the person ([`Changes`]).
//!
//! The bridge runs git itself ([`git`]) with hooks and every
//! configuration but its own switched off: the harness may write the
//! worktree, its record and its objects, so git reads a worktree only
//! through the bridge's own repository for it ([`private`]), the record
//! only as the bridge checked it ([`record`]), and the harness's objects
//! only as copied in without following a link ([`intake`]).

mod base;
mod carry;
mod changes;
mod common;
mod git;
mod idle;
mod index;
mod intake;
mod operator_command;
mod own;
mod private;
mod publish;
mod record;
mod remote;
mod watch;
mod worktree;

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use changes::{Changes, FileChange, Snapshot};
pub use git::GitError;
pub use publish::Publishable;
pub use remote::{Remote, RemoteSpec};
pub use worktree::Checkout;

/// The bridge's folder in a workspace, as the projection (a layer beside
/// this one) names it: kept out of git, out of a worktree's watch, and
/// kept when a worktree is put away.
const BRIDGE_DIR: &str = ".langbot";

/// Projects by name: what a binding's `project` picks among.
pub type Projects = BTreeMap<String, ProjectSpec>;

/// One repository the operator lets conversations work on.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ProjectSpec {
    /// The repository: a local folder with a `.git`.
    pub repository: PathBuf,
    /// The branch a conversation's branch starts from (default: the
    /// repository's current branch when the bridge starts).
    #[serde(default)]
    pub base: Option<String>,
    /// The conversation's branch, from a template: `{conversation}` is the
    /// conversation's slug, `{harness}` the harness's name.
    #[serde(default = "default_branch")]
    pub branch: String,
    /// Who the harness's commits are by (`Name <email>`).
    #[serde(default = "default_author")]
    pub author: String,
    /// How conversations share the repository.
    #[serde(default)]
    pub mode: ProjectMode,
    /// Where a person's approval publishes a conversation's branch; none:
    /// branches stay on this machine.
    #[serde(default)]
    pub publish: Option<RemoteSpec>,
    /// Where each conversation's branch is kept after every turn that
    /// moved it (`refs/harness-bridge/<branch>`), so an instance that
    /// takes the conversation over finds the work; with it, a missing
    /// `repository` is cloned from there at start.
    #[serde(default)]
    pub carry: Option<RemoteSpec>,
    /// Hours a conversation's worktree may go without a turn before it
    /// is put away (its changes kept, its files removed, its branch and
    /// session left; the next turn brings it back); 0: never.
    #[serde(default = "default_worktree_retention_hours")]
    pub worktree_retention_hours: u64,
}

/// How the conversations of a project share its repository.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProjectMode {
    /// Each conversation its own worktree, on a branch of its own.
    #[default]
    Worktree,
    /// Every conversation the one worktree (`{conversation}` is `shared`),
    /// and the project's turns one at a time, in arrival order: for a
    /// bot one person uses from several chats.
    Shared,
}

fn default_branch() -> String {
    "chat/{conversation}".into()
}

fn default_worktree_retention_hours() -> u64 {
    7 * 24
}

fn default_author() -> String {
    "harness-bridge <harness-bridge@localhost>".into()
}

/// Why a project could not be used: each says what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum ProjectError {
    /// A binding named a project the operator did not declare.
    #[error(
        "unknown project `{name}` (known: {known}); projects are declared in bridge.yaml's `projects`"
    )]
    Unknown {
        /// The name the binding gave.
        name: String,
        /// The declared names.
        known: String,
    },
    /// The declared repository is not one.
    #[error("project `{name}`: {repository} is not a git repository ({why})")]
    NotARepository {
        /// The project.
        name: String,
        /// Its declared folder.
        repository: String,
        /// What git said.
        why: String,
    },
    /// A setting cannot hold.
    #[error("project `{name}`: {why}")]
    Invalid {
        /// The project.
        name: String,
        /// What is wrong.
        why: String,
    },
    /// Git refused or failed.
    #[error("project `{name}`: {source}")]
    Git {
        /// The project.
        name: String,
        /// What git said.
        source: GitError,
    },
    /// The repository is no longer where the operator declared it.
    #[error(
        "project `{name}`: its repository {repository} is gone (moved or removed); \
         put it back, or change the project's `repository` and restart"
    )]
    Gone {
        /// The project.
        name: String,
        /// Its git folder, where it was.
        repository: String,
    },
    /// The base branch was deleted after the start: conversations that
    /// have a branch go on, a new one cannot start.
    #[error(
        "project `{name}`: its base branch `{base}` no longer exists, so no new conversation \
         can start on it; restore it, or change the project's `base` and restart"
    )]
    BaseGone {
        /// The project.
        name: String,
        /// The branch.
        base: String,
    },
    /// The agent asked to publish a branch with no commits beyond the base.
    #[error(
        "project `{name}`: branch `{branch}` has no commits beyond `{base}`, so there is \
         nothing to publish; commit the changes first"
    )]
    NothingToPublish {
        /// The project.
        name: String,
        /// The conversation's branch.
        branch: String,
        /// The base branch.
        base: String,
    },
    /// The push of an approved branch failed.
    #[error("project `{name}`: the push to {remote} failed: {said}")]
    Push {
        /// The project.
        name: String,
        /// Where to, without credentials.
        remote: String,
        /// What git said.
        said: String,
    },
    /// The operator's pull request command failed after a push.
    #[error("project `{name}`: the pull request command `{program}` failed ({said})")]
    PullRequest {
        /// The project.
        name: String,
        /// The command's program.
        program: String,
        /// Its exit and last words.
        said: String,
    },
    /// The workspace could not be arranged around the worktree.
    #[error("project `{name}`: {why}")]
    Workspace {
        /// The project.
        name: String,
        /// What went wrong.
        why: String,
    },
}

impl ProjectError {
    /// What the person in the chat is told, for the failures they can
    /// understand without the operator's paths; `None` for the rest
    /// (then the log says why).
    pub fn for_person(&self) -> Option<String> {
        match self {
            ProjectError::Gone { name, .. } => Some(format!(
                "Project `{name}` cannot be used now: its repository is no longer where the \
                 operator set it up (moved or removed). Nothing ran; the bridge's log tells the operator."
            )),
            ProjectError::BaseGone { name, base } => Some(format!(
                "Project `{name}` cannot take a new conversation now: its base branch `{base}` \
                 no longer exists. Nothing ran; the bridge's log tells the operator."
            )),
            _ => None,
        }
    }
}

/// A project a turn works on: its name and its settings, checked.
#[derive(Debug, Clone)]
pub struct Project {
    /// The name the binding picked.
    pub name: String,
    /// The repository's git folder (`.git`), where every worktree's
    /// objects and refs are.
    pub common_dir: PathBuf,
    /// The branch conversations start from.
    pub base: String,
    /// The branch template.
    pub branch: String,
    /// `Name <email>` for the harness's commits.
    pub author: (String, String),
    /// How conversations share it.
    pub mode: ProjectMode,
    /// Where its branches are published, when the operator lets them be.
    pub publish: Option<Remote>,
    /// Where conversations' branches are carried between instances.
    pub carry: Option<Remote>,
    /// How long a worktree may go without a turn before it is put away.
    pub retention: Option<std::time::Duration>,
    /// The configuration of the bridge's own repository for each of its
    /// worktrees (from the repository's, without anything that runs).
    private_config: std::sync::Arc<str>,
    /// Who its harnesses are outside their namespace, when not the
    /// bridge's user (a root bridge's cage): what they write is theirs.
    owner: Option<&'static crate::owner::Owner>,
    /// Held by the turn working in a shared project's worktree: turns of
    /// several conversations take it in the order they asked.
    turn: std::sync::Arc<tokio::sync::Mutex<()>>,
    /// Its worktrees' watches kept between their turns.
    watches: watch::KeptWatches,
}

/// The git folder of the repository at `repository`, or why it is not
/// one (no folder, no `.git`, or what git says), in words that name the
/// fix.
async fn repository_folder(
    name: &str,
    repository: &std::path::Path,
) -> Result<PathBuf, ProjectError> {
    let not_one = |why: String| ProjectError::NotARepository {
        name: name.into(),
        repository: repository.display().to_string(),
        why,
    };
    if !repository.is_dir() {
        return Err(not_one("there is no such folder".into()));
    }
    if !repository.join(".git").exists() {
        return Err(not_one(
            "no .git in it: name the folder that holds the repository's .git, or make it one with `git init`".into(),
        ));
    }
    git::common_dir(repository)
        .await
        .map_err(|e| not_one(e.to_string()))
}

impl Project {
    /// Check a declared project once, at start: the repository is one, its
    /// base branch exists, the template and author make sense, and its
    /// harnesses, as `owner` outside their namespace (a root bridge's
    /// cage), can read it.
    pub async fn open(
        name: &str,
        spec: &ProjectSpec,
        owner: Option<&'static crate::owner::Owner>,
    ) -> Result<Project, ProjectError> {
        let invalid = |why: String| ProjectError::Invalid {
            name: name.into(),
            why,
        };
        if !spec.repository.is_absolute() {
            return Err(invalid(format!(
                "repository {} must be an absolute path",
                spec.repository.display()
            )));
        }
        if let Some(carry) = spec.carry.as_ref().filter(|_| !spec.repository.exists()) {
            clone_carried(name, &spec.repository, carry, owner).await?;
        }
        let common_dir = repository_folder(name, &spec.repository).await?;
        let base = match &spec.base {
            Some(base) => base.clone(),
            None => git::current_branch(&common_dir)
                .await
                .map_err(|source| ProjectError::Git {
                    name: name.into(),
                    source,
                })?,
        };
        if !git::Git::bare(&common_dir)
            .has_commit(&format!("refs/heads/{base}"))
            .await
        {
            return Err(invalid(format!("its base branch `{base}` does not exist")));
        }
        if !spec.branch.contains("{conversation}") {
            return Err(invalid(format!(
                "branch template `{}` must contain {{conversation}}: every conversation needs a branch of its own",
                spec.branch
            )));
        }
        let author = parse_author(&spec.author)
            .ok_or_else(|| invalid(format!("author `{}` is not `Name <email>`", spec.author)))?;
        if let Some(owner) = owner {
            for_harnesses(&common_dir, owner).map_err(invalid)?;
        }
        let config =
            private::read_config(&common_dir)
                .await
                .map_err(|source| ProjectError::Git {
                    name: name.into(),
                    source,
                })?;
        if config.partial {
            return Err(invalid(format!(
                "{} is a partial clone (extensions.partialClone): a conversation's worktree \
                 needs every object of its branch, and a caged agent cannot fetch the missing \
                 ones; fetch them all (`git fetch --refetch` with no filter, or clone it whole) \
                 and restart",
                spec.repository.display()
            )));
        }
        if !config.credentials.is_empty() {
            tracing::warn!(project = %name, keys = %config.credentials.join(", "), "{}", credentials_warning(&config.credentials));
        }
        let private_config = config.private;
        let repo = git::Git::bare(&common_dir);
        let publish = match &spec.publish {
            Some(spec) => Some(Remote::open(name, "publish", spec, Some(&repo)).await?),
            None => None,
        };
        let carry = match &spec.carry {
            Some(spec) => Some(Remote::open(name, "carry", spec, Some(&repo)).await?),
            None => None,
        };
        Ok(Project {
            name: name.into(),
            common_dir,
            base,
            branch: spec.branch.clone(),
            author,
            mode: spec.mode,
            publish,
            carry,
            retention: (spec.worktree_retention_hours > 0).then(|| {
                std::time::Duration::from_secs(spec.worktree_retention_hours.saturating_mul(3600))
            }),
            private_config: private_config.into(),
            owner,
            turn: std::sync::Arc::default(),
            watches: Default::default(),
        })
    }

    /// The branch of one conversation's worktree, by its safe name (of
    /// every conversation's, in a shared project); the run names it for
    /// a turn (`run::prepare::conversation_branch`).
    pub fn branch_for(&self, conversation: &str, harness: &str) -> String {
        let conversation = match self.mode {
            ProjectMode::Worktree => conversation,
            ProjectMode::Shared => "shared",
        };
        self.branch
            .replace("{conversation}", conversation)
            .replace("{harness}", harness)
    }

    /// A shared project's turn waits here for the one before it (FIFO);
    /// `None` for a project whose conversations each have their own.
    pub async fn take_turn(&self) -> Option<tokio::sync::OwnedMutexGuard<()>> {
        match self.mode {
            ProjectMode::Worktree => None,
            ProjectMode::Shared => Some(self.turn.clone().lock_owned().await),
        }
    }

    /// The variables the harness's git runs with: the project's author,
    /// so a commit needs no git configuration in the conversation's home;
    /// and no automatic maintenance, which would pack the repository's
    /// refs, a file the cage keeps the harness from writing.
    pub fn git_env(&self) -> Vec<(&'static str, String)> {
        let (name, email) = &self.author;
        vec![
            ("GIT_AUTHOR_NAME", name.clone()),
            ("GIT_AUTHOR_EMAIL", email.clone()),
            ("GIT_COMMITTER_NAME", name.clone()),
            ("GIT_COMMITTER_EMAIL", email.clone()),
            ("GIT_CONFIG_COUNT", "2".into()),
            ("GIT_CONFIG_KEY_0", "maintenance.auto".into()),
            ("GIT_CONFIG_VALUE_0", "false".into()),
            ("GIT_CONFIG_KEY_1", "gc.auto".into()),
            ("GIT_CONFIG_VALUE_1", "0".into()),
        ]
    }
}

/// Each instance keeps its own clone of a carried project: made at
/// `repository` from `carry` (readable by every user, with the folders
/// made for it, when the harnesses are `owner`, another user).
async fn clone_carried(
    name: &str,
    repository: &std::path::Path,
    carry: &RemoteSpec,
    owner: Option<&'static crate::owner::Owner>,
) -> Result<(), ProjectError> {
    let remote = Remote::open(name, "carry", carry, None).await?;
    // The folders made here: the clone, then its parents.
    let made: Vec<PathBuf> = repository
        .ancestors()
        .take_while(|dir| !dir.exists())
        .map(PathBuf::from)
        .collect();
    if let Some(parent) = repository.parent() {
        std::fs::create_dir_all(parent).map_err(|e| ProjectError::Invalid {
            name: name.into(),
            why: format!("cannot make {}: {e}", parent.display()),
        })?;
    }
    git::clone(&remote.url, repository, remote.env())
        .await
        .map_err(|source| ProjectError::Git {
            name: name.into(),
            source,
        })?;
    if owner.is_some() {
        open_to_read(&made).map_err(|e| ProjectError::Invalid {
            name: name.into(),
            why: format!("cannot let its harnesses read its clone: {e}"),
        })?;
    }
    tracing::info!(project = %name, from = %remote.shown, "the project's repository is cloned");
    Ok(())
}

/// The repository at `common_dir` made ready for harnesses that are
/// `owner` outside their namespace (a root bridge's cage): they must read
/// it and pass into `worktrees/` to their record, and must not read the
/// bridge's own folder in it (other conversations' indexes and states).
/// Why not, in a sentence that names the fix.
fn for_harnesses(common_dir: &std::path::Path, owner: &crate::owner::Owner) -> Result<(), String> {
    use crate::owner::Want;
    use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
    owner.let_pass(common_dir, "to read the repository");
    for path in [common_dir.to_path_buf(), common_dir.join("objects")] {
        if let Some(blocked) = owner.cannot_reach(&path, Want::Read) {
            return Err(format!(
                "its harnesses, which run as {who} outside their namespace, cannot read the \
                 repository: {blocked}. Let other users pass through (and read) it (`chmod o+rx`), \
                 keep it elsewhere, or run the bridge as an ordinary user \
                 (packaging/harness-bridge.service)",
                who = owner.describe()
            ));
        }
    }
    let made = |dir: std::path::PathBuf, mode: u32| {
        std::fs::DirBuilder::new()
            .mode(mode)
            .create(&dir)
            .or_else(|e| match e.kind() {
                std::io::ErrorKind::AlreadyExists => Ok(()),
                _ => Err(e),
            })
            .and_then(|()| std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)))
            .map_err(|e| format!("cannot make {} ready for its harnesses: {e}", dir.display()))
    };
    made(common_dir.join("worktrees"), 0o711)?;
    made(common_dir.join(changes::OWN_DIR), 0o700)?;
    // What git wrote under the bridge's umask before (0600), readable.
    let shared: Vec<PathBuf> = ["objects", "refs", "HEAD", "config", "packed-refs", "info"]
        .iter()
        .map(|name| common_dir.join(name))
        .filter(|path| path.exists())
        .collect();
    let mut opened = 0;
    for path in &shared {
        opened += open_tree_to_read(path)
            .map_err(|e| format!("cannot let its harnesses read {}: {e}", path.display()))?;
    }
    if opened > 0 {
        tracing::info!(repository = %common_dir.display(), entries = opened, "files of the repository only its owner could read are made readable to the caged harnesses");
    }
    Ok(())
}

/// The folders in `made` (the clone, then the parents made for it)
/// readable by every user, the whole clone (the bridge's own making)
/// with them: a root bridge's harnesses are another user outside their
/// namespace, and read the repository.
fn open_to_read(made: &[PathBuf]) -> std::io::Result<()> {
    for dir in made.iter().skip(1) {
        open_one(dir, &std::fs::symlink_metadata(dir)?)?;
    }
    match made.first() {
        Some(clone) => open_tree_to_read(clone).map(drop),
        None => Ok(()),
    }
}

/// `path`, and all below it, readable by every user (folders entered);
/// links are not followed. How many entries changed.
fn open_tree_to_read(path: &std::path::Path) -> std::io::Result<usize> {
    let mut opened = 0;
    for entry in walkdir::WalkDir::new(path) {
        let entry = entry.map_err(std::io::Error::other)?;
        if !entry.file_type().is_symlink() {
            let meta = entry.metadata().map_err(std::io::Error::other)?;
            opened += usize::from(open_one(entry.path(), &meta)?);
        }
    }
    Ok(opened)
}

/// One file (`o+r`) or folder (`o+rx`) readable by every user; whether it
/// changed.
fn open_one(path: &std::path::Path, meta: &std::fs::Metadata) -> std::io::Result<bool> {
    use std::os::unix::fs::PermissionsExt as _;
    let mode = meta.permissions().mode() & 0o7777;
    let more = if meta.is_dir() { 0o055 } else { 0o044 };
    if mode & more == more {
        return Ok(false);
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode | more))?;
    Ok(true)
}

/// What the operator hears of credentials in a repository's configuration
/// (`keys`), and what to do.
fn credentials_warning(keys: &[String]) -> String {
    format!(
        "the repository's git configuration holds credentials ({}), which every conversation's \
         agent of the project can read (it reads the repository's git folder): take them out; \
         give publishing its token in `token_env` or its key in `ssh_key`, and keep any other \
         credential in a helper or file outside the repository",
        keys.join(", ")
    )
}

/// What `doctor` says of the credentials in the git configuration of
/// `repository` (a project's folder), if it holds any.
pub async fn credentials_in(repository: &std::path::Path) -> Option<String> {
    let common_dir = git::common_dir(repository).await.ok()?;
    let config = private::read_config(&common_dir).await.ok()?;
    (!config.credentials.is_empty()).then(|| credentials_warning(&config.credentials))
}

/// `Name <email>` → its parts.
fn parse_author(author: &str) -> Option<(String, String)> {
    let (name, rest) = author.split_once('<')?;
    let email = rest.strip_suffix('>')?;
    let name = name.trim();
    (!name.is_empty() && email.contains('@') && !email.contains(['<', '>', '\n']))
        .then(|| (name.to_string(), email.trim().to_string()))
}

/// Projects declared with each run rather than at start (the LangBot
/// plugin's settings, through the relay): each opened on first use and
/// kept while its declaration stays the same, so a shared project's turns
/// queue on the one project. A project opened anew has its idle worktrees
/// put away at once, beside the run, as `serve` does at its start: a
/// relay started again (its plugin restarted) would otherwise wait an
/// hour for its first look.
#[derive(Debug, Default)]
pub struct OpenedProjects {
    opened: tokio::sync::Mutex<BTreeMap<String, (ProjectSpec, Project)>>,
    owner: Option<&'static crate::owner::Owner>,
}

impl OpenedProjects {
    /// None opened yet; their harnesses are `owner` outside their
    /// namespace (see [`Project::open`]).
    pub fn new(owner: Option<&'static crate::owner::Owner>) -> OpenedProjects {
        OpenedProjects {
            opened: Default::default(),
            owner,
        }
    }

    /// The project `name` as `spec` declares it, checked the first time.
    pub async fn open(&self, name: &str, spec: &ProjectSpec) -> Result<Project, ProjectError> {
        let mut opened = self.opened.lock().await;
        if let Some((kept, project)) = opened.get(name)
            && kept == spec
        {
            return Ok(project.clone());
        }
        let project = Project::open(name, spec, self.owner).await?;
        opened.insert(name.to_string(), (spec.clone(), project.clone()));
        let idle = project.clone();
        tokio::spawn(async move {
            let put_away = idle.put_away_idle().await;
            if put_away > 0 {
                tracing::info!(
                    worktrees = put_away,
                    "put away worktrees past their retention"
                );
            }
        });
        Ok(project)
    }

    /// Put away the idle worktrees of the projects opened so far; how many.
    pub async fn put_away_idle(&self) -> usize {
        let projects: Vec<Project> = self
            .opened
            .lock()
            .await
            .values()
            .map(|(_, p)| p.clone())
            .collect();
        let mut put_away = 0;
        for project in projects {
            put_away += project.put_away_idle().await;
        }
        put_away
    }
}

/// What the text of a worktree record's HEAD (the harness's to write)
/// names, as the bridge reads it: a commit id, or the full name of a ref;
/// `None` for anything else. For the fuzz target.
pub fn head_named(text: &str) -> Option<String> {
    match record::parse_head(text).ok()? {
        record::Head::Commit(id) => Some(id),
        record::Head::Ref(name) => Some(name),
    }
}

/// Every declared project, checked: the service does not start on one it
/// cannot use. Their harnesses are `owner` outside their namespace (see
/// [`Project::open`]).
pub async fn open_all(
    projects: &Projects,
    owner: Option<&'static crate::owner::Owner>,
) -> Result<BTreeMap<String, Project>, ProjectError> {
    let mut opened = BTreeMap::new();
    for (name, spec) in projects {
        opened.insert(name.clone(), Project::open(name, spec, owner).await?);
    }
    Ok(opened)
}

/// The project a binding picked, or why it cannot have it.
pub fn pick<'a>(
    projects: &'a BTreeMap<String, Project>,
    name: &str,
) -> Result<&'a Project, ProjectError> {
    projects.get(name).ok_or_else(|| ProjectError::Unknown {
        name: name.into(),
        known: if projects.is_empty() {
            "none".into()
        } else {
            projects.keys().cloned().collect::<Vec<_>>().join(", ")
        },
    })
}

/// A project on a one-commit repository in a folder of its own, for the
/// module's tests.
#[cfg(test)]
pub(crate) mod testing {
    use std::path::Path;

    use super::{Project, ProjectSpec};

    /// Run git in `dir` as the operator would, failing the test if it fails.
    pub fn git(dir: &Path, args: &[&str]) {
        let status = std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(["-c", "user.name=Op", "-c", "user.email=op@example.org"])
            .args(args)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .status()
            .expect("git runs");
        assert!(status.success(), "git {args:?}");
    }

    /// Project `web`: a repository at `dir/web` whose `main` holds
    /// `greeting.txt`, with `extra` added to its settings.
    pub async fn project(dir: &Path, extra: &str) -> Project {
        let repo = dir.join("web");
        std::fs::create_dir_all(&repo).unwrap();
        git(&repo, &["init", "-q", "-b", "main"]);
        std::fs::write(repo.join("greeting.txt"), "hello\n").unwrap();
        git(&repo, &["add", "greeting.txt"]);
        git(&repo, &["commit", "-q", "-m", "Hello"]);
        let spec: ProjectSpec =
            serde_yaml::from_str(&format!("repository: {}\n{extra}", repo.display())).unwrap();
        Project::open("web", &spec, None).await.unwrap()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_author_is_a_name_and_an_email() {
        assert_eq!(
            parse_author("Chat Bot <bot@example.org>"),
            Some(("Chat Bot".into(), "bot@example.org".into()))
        );
        assert_eq!(parse_author("bot@example.org"), None);
        assert_eq!(parse_author("<bot@example.org>"), None);
        assert_eq!(parse_author("Bot <not-an-email>"), None);
    }

    #[test]
    fn an_unknown_project_names_the_known_ones() {
        let err = pick(&BTreeMap::new(), "web").unwrap_err().to_string();
        assert!(err.contains("unknown project `web` (known: none)"), "{err}");
    }
}
