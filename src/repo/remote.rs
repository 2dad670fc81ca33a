//! A remote the bridge pushes to with the operator's credentials.
//!
//! The address is read once, when the project is opened, so a harness
//! that rewrites the repository's configuration cannot redirect a push;
//! the token lives in the bridge's environment under a name the operator
//! chose, and is taken out of every harness's environment.

use std::path::PathBuf;

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use super::ProjectError;
use super::git::Git;

/// A remote the bridge pushes to (a project's `publish`, or `carry`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteSpec {
    /// A remote of the repository (`origin`) or a URL (or a path).
    pub remote: String,
    /// The variable in the bridge's environment holding an HTTPS token
    /// for the push (never passed to a harness).
    #[serde(default)]
    pub token_env: Option<String>,
    /// The user name sent with the token (`x-access-token` suits GitHub;
    /// GitLab takes `oauth2`).
    #[serde(default = "default_token_user")]
    pub token_user: String,
    /// A private SSH key file for the push.
    #[serde(default)]
    pub ssh_key: Option<PathBuf>,
    /// `publish` only: a command the bridge runs once an approved push
    /// went through, to open a pull or merge request (`["gh", "pr",
    /// "create", "--head", "{branch}", "--base", "{base}", "--fill"]`);
    /// `{branch}`, `{base}`, `{commit}` and `{remote}` are filled in. It
    /// runs in the repository's folder with the bridge's environment
    /// (never a harness's), and the last address it prints is told.
    #[serde(default)]
    pub pull_request: Option<Vec<String>>,
}

fn default_token_user() -> String {
    "x-access-token".into()
}

/// A remote, checked when the project is opened: its address read once,
/// its credentials found.
#[derive(Debug, Clone)]
pub struct Remote {
    /// The address pushed to, read from the repository at start.
    pub(super) url: String,
    /// The same without any user part, for people.
    pub shown: String,
    /// The variable holding the token.
    pub token_env: Option<String>,
    token_user: String,
    ssh_key: Option<PathBuf>,
    /// The command that opens a pull request after a push, unfilled.
    pub(super) pull_request: Option<Vec<String>>,
}

impl Remote {
    /// Check the settings and read the remote's address now.
    pub(super) async fn open(
        name: &str,
        key: &str,
        spec: &RemoteSpec,
        git: Option<&Git>,
    ) -> Result<Remote, ProjectError> {
        let invalid = |why: String| ProjectError::Invalid {
            name: name.into(),
            why: format!("{key}: {why}"),
        };
        let url = if is_address(&spec.remote) {
            spec.remote.clone()
        } else {
            let git = git.ok_or_else(|| {
                invalid(format!(
                    "`{}` must be a URL or a path: the repository is made from it",
                    spec.remote
                ))
            })?;
            let key = |k: &str| format!("remote.{}.{k}", spec.remote);
            match git.line(&["config", "--get", &key("pushurl")]).await {
                Ok(url) if !url.is_empty() => url,
                _ => git
                    .line(&["config", "--get", &key("url")])
                    .await
                    .ok()
                    .filter(|url| !url.is_empty())
                    .ok_or_else(|| {
                        invalid(format!(
                            "remote `{}` is neither a remote of the repository nor a URL",
                            spec.remote
                        ))
                    })?,
            }
        };
        if has_password(&url) {
            return Err(invalid(
                "the remote's URL carries a password; give the token in `token_env` instead, \
                 so it stays out of git's configuration and of every harness's reach"
                    .into(),
            ));
        }
        if let Some(var) = &spec.token_env
            && std::env::var(var).map_or(true, |v| v.trim().is_empty())
        {
            return Err(invalid(format!(
                "`token_env` names `{var}`, which is not set in the bridge's environment"
            )));
        }
        if let Some(key) = &spec.ssh_key
            && (!key.is_absolute() || !key.is_file() || key.to_string_lossy().contains('\''))
        {
            return Err(invalid(format!(
                "`ssh_key` {} is not a readable file given by an absolute path",
                key.display()
            )));
        }
        if let Some(command) = &spec.pull_request {
            if key != "publish" {
                return Err(invalid(
                    "`pull_request` goes with `publish`: a carried branch is no one's to review"
                        .into(),
                ));
            }
            if command
                .first()
                .is_none_or(|program| program.trim().is_empty())
            {
                return Err(invalid(
                    "`pull_request` is a command and its arguments, e.g. \
                     [gh, pr, create, --head, \"{branch}\", --base, \"{base}\", --fill]"
                        .into(),
                ));
            }
        }
        Ok(Remote {
            shown: without_user(&url),
            url,
            token_env: spec.token_env.clone(),
            token_user: spec.token_user.clone(),
            ssh_key: spec.ssh_key.clone(),
            pull_request: spec.pull_request.clone(),
        })
    }

    /// The variables git pushes with: the token as an HTTP header (in the
    /// environment, never in argv), the SSH key, the bridge user's SSH
    /// agent and home for keys of their own.
    pub(super) fn env(&self) -> Vec<(String, String)> {
        let mut env = Vec::new();
        for var in ["HOME", "SSH_AUTH_SOCK"] {
            if let Ok(value) = std::env::var(var) {
                env.push((var.to_string(), value));
            }
        }
        if let Some(token) = self
            .token_env
            .as_ref()
            .and_then(|var| std::env::var(var).ok())
        {
            let basic = base64::engine::general_purpose::STANDARD.encode(format!(
                "{}:{}",
                self.token_user,
                token.trim()
            ));
            env.extend([
                ("GIT_CONFIG_COUNT".into(), "1".into()),
                ("GIT_CONFIG_KEY_0".into(), "http.extraHeader".into()),
                (
                    "GIT_CONFIG_VALUE_0".into(),
                    format!("Authorization: Basic {basic}"),
                ),
            ]);
        }
        let mut ssh = "ssh -o BatchMode=yes".to_string();
        if let Some(key) = &self.ssh_key {
            ssh.push_str(&format!(" -o IdentitiesOnly=yes -i '{}'", key.display()));
        }
        env.push(("GIT_SSH_COMMAND".into(), ssh));
        env
    }
}

/// A URL or a path, rather than the name of a remote.
fn is_address(remote: &str) -> bool {
    remote.contains(['/', ':', '\\'])
}

/// Whether the git setting `key` (as `git config --list` names it) holds a
/// credential: an HTTP header of its own (`http.extraHeader`, which
/// carries a token), a key named for a secret, or a URL with a user part
/// over HTTP (a token stands in the user's place as often as a
/// password after it).
pub(super) fn holds_credential(key: &str, value: &str) -> bool {
    let named = ["token", "password", "secret"].iter().any(|word| {
        key.rsplit('.')
            .next()
            .is_some_and(|last| last.contains(word))
    });
    let header = key.starts_with("http.") && key.ends_with(".extraheader");
    let url = key.ends_with(".url") || key.ends_with(".pushurl") || key.starts_with("url.");
    let in_url = |text: &str| {
        has_password(text)
            || text.split_once("://").is_some_and(|(scheme, rest)| {
                scheme.starts_with("http")
                    && rest
                        .split('/')
                        .next()
                        .is_some_and(|authority| authority.contains('@'))
            })
    };
    named || header || (url && (in_url(value) || in_url(key)))
}

/// `scheme://user:password@host…`
fn has_password(url: &str) -> bool {
    url.split_once("://")
        .and_then(|(_, rest)| rest.split('/').next())
        .and_then(|authority| authority.rsplit_once('@'))
        .is_some_and(|(user, _)| user.contains(':'))
}

/// The URL without its user part (`https://host/…`).
fn without_user(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
            let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
            format!("{scheme}://{host}{path}")
        }
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_in_a_repositorys_configuration_are_found() {
        for (key, value) in [
            (
                "remote.origin.url",
                "https://bot:s3cret@example.org/web.git",
            ),
            (
                "remote.origin.pushurl",
                "https://ghp_token123@example.org/web.git",
            ),
            ("http.extraheader", "Authorization: Bearer x"),
            (
                "http.https://example.org/.extraheader",
                "Authorization: Basic y",
            ),
            (
                "url.https://user:pw@example.org/.insteadof",
                "https://example.org/",
            ),
            ("lfs.accesstoken", "abc"),
        ] {
            assert!(holds_credential(key, value), "{key}");
        }
        for (key, value) in [
            ("remote.origin.url", "https://example.org/web.git"),
            ("remote.origin.url", "git@example.org:team/web.git"),
            ("remote.origin.url", "ssh://git@example.org/team/web.git"),
            ("user.email", "a@example.org"),
            ("core.autocrlf", "input"),
        ] {
            assert!(!holds_credential(key, value), "{key}");
        }
    }

    #[test]
    fn a_url_shows_without_its_user_and_a_password_is_found() {
        assert_eq!(
            without_user("https://bot@example.org/team/web.git"),
            "https://example.org/team/web.git"
        );
        assert_eq!(without_user("/srv/web.git"), "/srv/web.git");
        assert!(has_password("https://bot:s3cret@example.org/team/web.git"));
        assert!(!has_password("https://bot@example.org/team/web.git"));
        assert!(!has_password("git@example.org:team/web.git"));
        assert!(is_address("git@example.org:team/web.git") && !is_address("origin"));
    }

    #[tokio::test]
    async fn a_pull_request_command_goes_with_publish_alone_and_names_a_program() {
        let spec = |command: &[&str]| RemoteSpec {
            remote: "/srv/web.git".into(),
            token_env: None,
            token_user: default_token_user(),
            ssh_key: None,
            pull_request: Some(command.iter().map(|a| a.to_string()).collect()),
        };
        let carried = Remote::open("web", "carry", &spec(&["gh", "pr", "create"]), None).await;
        let err = carried.unwrap_err().to_string();
        assert!(err.contains("`pull_request` goes with `publish`"), "{err}");
        let empty = Remote::open("web", "publish", &spec(&[]), None).await;
        let err = empty.unwrap_err().to_string();
        assert!(err.contains("is a command and its arguments"), "{err}");
        let fine = Remote::open("web", "publish", &spec(&["gh", "pr", "create"]), None).await;
        assert!(fine.is_ok_and(|r| r.pull_request.is_some()));
    }

    #[test]
    fn the_token_rides_the_environment_as_a_header() {
        let remote = Remote {
            url: "https://example.org/web.git".into(),
            shown: "https://example.org/web.git".into(),
            token_env: Some("PATH".into()),
            token_user: "oauth2".into(),
            ssh_key: Some("/keys/web".into()),
            pull_request: None,
        };
        let env = remote.env();
        let value = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(value("GIT_CONFIG_KEY_0"), Some("http.extraHeader"));
        let header = value("GIT_CONFIG_VALUE_0").unwrap();
        let basic = header.strip_prefix("Authorization: Basic ").unwrap();
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(basic)
            .unwrap();
        let path = std::env::var("PATH").unwrap();
        assert_eq!(decoded, format!("oauth2:{}", path.trim()).into_bytes());
        assert!(value("GIT_SSH_COMMAND").unwrap().contains("-i '/keys/web'"));
    }
}
