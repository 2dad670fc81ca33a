//! Publishing a conversation's branch: only the bridge pushes, only the
//! commit a person approved, and with credentials the harness never sees.
//!
//! The agent asks (the `publish` tool); the bridge reads what would go
//! ([`Publishable::request`]: the branch's commits beyond the base and
//! their diffstat) and the person gets a card; on their approval the next
//! turn pushes that one commit ([`Project::push`]) before the harness runs.
//! Where to and with what credentials is the project's [`Remote`].

use super::git::Git;
use super::{Checkout, Project, ProjectError};
use crate::interaction::{PublishRequest, short};

/// Most commits a card lists; the rest are counted.
const LISTED_COMMITS: usize = 10;
/// Most of git's count of the files a card's commits change that is read.
const MAX_NUMSTAT_BYTES: usize = 16 * 1024 * 1024;
/// Longest the pull request command may take.
const PULL_REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

/// A conversation's worktree of a project that publishes: what the
/// `publish` tool reads.
#[derive(Debug, Clone)]
pub struct Publishable {
    /// The project.
    pub project: Project,
    /// The conversation's worktree.
    pub checkout: Checkout,
}

impl Publishable {
    /// What publishing the branch now would push: its head, the commits
    /// beyond the base and what they change. Refused when there is
    /// nothing committed to publish.
    pub async fn request(&self) -> Result<PublishRequest, ProjectError> {
        let project = &self.project;
        let Some(publisher) = &project.publish else {
            return Err(ProjectError::Invalid {
                name: project.name.clone(),
                why: "it does not publish".into(),
            });
        };
        let at_git = |source| ProjectError::Git {
            name: project.name.clone(),
            source,
        };
        let checkout = &self.checkout;
        let head = checkout
            .head_commit()
            .await
            .map_err(|why| checkout.fail(format!("the worktree's {why}")))?;
        // The card's commit is in the repository before anyone sees it.
        if let super::own::TakenIn::Refused(why) = checkout.take_in(&head).await? {
            return Err(checkout.fail(why));
        }
        let base = format!("refs/heads/{}^{{commit}}", project.base);
        let base = Git::bare(&project.common_dir)
            .line(&["rev-parse", "--verify", &base])
            .await
            .map_err(at_git)?;
        // Read in the bridge's repository for the worktree: no program of
        // the repository's configuration runs over the agent's commits.
        let git = checkout.own_git();
        let range = format!("{base}..{head}");
        let count: u64 = git
            .line(&["rev-list", "--count", &range])
            .await
            .map_err(at_git)?
            .parse()
            .unwrap_or(0);
        if count == 0 {
            return Err(ProjectError::NothingToPublish {
                name: project.name.clone(),
                branch: self.checkout.branch.clone(),
                base: project.base.clone(),
            });
        }
        let listed = LISTED_COMMITS.to_string();
        let log = git
            .run(&super::changes::subjects_log(&listed, &range))
            .await
            .map_err(at_git)?;
        let commits: Vec<String> = String::from_utf8_lossy(&log)
            .lines()
            .map(|line| line.trim_end().to_string())
            .collect();
        let three_dots = format!("{base}...{head}");
        // Counted up to a bound: a card names the files' number and lines.
        let mut args = super::changes::NUMSTAT.to_vec();
        args.push(&three_dots);
        let numstat = git
            .run_capped(&args, MAX_NUMSTAT_BYTES)
            .await
            .map_err(at_git)?
            .bytes;
        let files = super::changes::parse_numstat(&numstat);
        let (added, removed) = files
            .iter()
            .filter_map(|f| f.lines)
            .fold((0, 0), |(a, r), (fa, fr)| (a + fa, r + fr));
        Ok(PublishRequest {
            project: project.name.clone(),
            branch: self.checkout.branch.clone(),
            remote: publisher.shown.clone(),
            more_commits: count.saturating_sub(commits.len() as u64),
            head,
            commits,
            files: files.len() as u64,
            added,
            removed,
        })
    }
}

impl Project {
    /// Push the one commit a person approved to the request's branch where
    /// the project publishes. Not forced: a remote branch that moved on
    /// is left as it is, and the person is told.
    pub async fn push(&self, request: &PublishRequest) -> Result<(), ProjectError> {
        let Some(publisher) = &self.publish else {
            return Err(ProjectError::Invalid {
                name: self.name.clone(),
                why: "it no longer publishes (its `publish` settings are gone)".into(),
            });
        };
        let git = Git::bare(&self.common_dir);
        if !git.has_commit(&request.head).await {
            return Err(ProjectError::Push {
                name: self.name.clone(),
                remote: publisher.shown.clone(),
                said: format!(
                    "commit {} is no longer in the repository",
                    short(&request.head)
                ),
            });
        }
        let refspec = format!("{}:refs/heads/{}", request.head, request.branch);
        git.with_env(publisher.env())
            .run(&[
                "push",
                "--porcelain",
                "--no-verify",
                &publisher.url,
                &refspec,
            ])
            .await
            .map(drop)
            .map_err(|e| ProjectError::Push {
                name: self.name.clone(),
                remote: publisher.shown.clone(),
                said: e.to_string(),
            })
    }

    /// After an approved push: open a pull request with the command the
    /// operator configured; what the person is told of it (the address
    /// it printed), or why it failed. `None` without such a command.
    pub async fn open_pull_request(
        &self,
        request: &PublishRequest,
    ) -> Option<Result<String, ProjectError>> {
        let command = self.publish.as_ref()?.pull_request.as_ref()?;
        let fill = |arg: &String| {
            arg.replace("{branch}", &request.branch)
                .replace("{base}", &self.base)
                .replace("{commit}", &request.head)
                .replace("{remote}", &request.remote)
        };
        let (program, args) = command.split_first()?;
        // The operator's checkout when there is one, else the git folder.
        let folder = match self.common_dir.file_name() {
            Some(name) if name == ".git" => self.common_dir.parent()?,
            _ => &self.common_dir,
        };
        let args = args.iter().map(fill).collect();
        let failed = |said: String| ProjectError::PullRequest {
            name: self.name.clone(),
            program: program.clone(),
            said,
        };
        let opened =
            match super::operator_command::run(program, args, folder, PULL_REQUEST_TIMEOUT).await {
                Err(e) => Err(failed(e.to_string())),
                Ok(out) if !out.status.success() => {
                    let stderr = String::from_utf8_lossy(&out.stderr);
                    let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
                    Err(failed(format!(
                        "{}{}",
                        out.status,
                        last.map(|l| format!(": {}", l.trim())).unwrap_or_default()
                    )))
                }
                Ok(out) => {
                    let stdout = String::from_utf8_lossy(&out.stdout);
                    let mut lines = stdout
                        .lines()
                        .rev()
                        .map(str::trim)
                        .filter(|l| !l.is_empty());
                    let address = lines.clone().find(|l| l.contains("://"));
                    Ok(address
                        .or_else(|| lines.next())
                        .unwrap_or("opened")
                        .to_string())
                }
            };
        if let Err(e) = &opened {
            tracing::warn!(branch = %request.branch, "{e}");
        }
        Some(opened)
    }
}
