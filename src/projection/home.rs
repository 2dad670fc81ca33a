//! The conversation's own harness home, at `.langbot/home`.
//!
//! A harness keeps its sessions, config and caches in its home. Shared by
//! every conversation, one conversation's agent could read another's
//! sessions, and a cage that lets a harness write only its workspace would
//! leave it no home at all: so each conversation gets one inside its
//! workspace, and the variables that point the CLI there (`HOME`,
//! `CLAUDE_CONFIG_DIR`, `CODEX_HOME`, `XDG_*`…).
//!
//! What the operator set up in the usual home (credentials, the model's
//! provider) is carried in as symbolic links to the operator's files:
//! never copied into the workspace, as they may hold secrets and no
//! secret is written there. A root bridge's harness, another user outside
//! its namespace, is linked to a copy it may read, kept beside the
//! workspaces ([`super::carried`]), where it could not read the
//! operator's file. A file the operator does not have is not linked, and
//! a link left from an earlier turn whose file is gone is removed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{ConfinedDir, ProjectionError, Report, paths, relative_components};

/// A harness home per conversation, as its family and spec declare it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Home {
    /// The variables that point the harness into the home, each with the
    /// path inside it that it names (empty: the home itself).
    pub env: Vec<(String, String)>,
    /// Files written in it every turn, by relative path (settings the
    /// harness needs to start headless, never secrets).
    pub files: BTreeMap<String, String>,
    /// The operator's files carried in, read-only, as links.
    pub carry: Vec<Carry>,
}

/// Files of the operator's usual home linked into the conversation's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Carry {
    /// The folder in the conversation's home they go to (empty: the home
    /// itself), e.g. `.codex`.
    pub into: String,
    /// Where the operator's folder is, as the CLI would find it:
    /// `$VAR` or `$VAR/path`, the first whose variable is set (not empty)
    /// in the harness's environment wins, e.g. `["$CODEX_HOME",
    /// "$HOME/.codex"]`.
    pub from: Vec<String>,
    /// The files (or folders) carried, relative to both folders.
    pub files: Vec<String>,
    /// Those of them that hold a sign-in (tokens, a key), which its agent
    /// can read like every carried file.
    pub sign_in: Vec<String>,
}

/// The home as projected: what the harness's environment gets, and what
/// it must be able to read outside its workspace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProjectedHome {
    /// The home folder (`<workspace>/.langbot/home`).
    pub path: PathBuf,
    /// Each variable and the value the harness gets, all under `path`;
    /// they replace the operator's values.
    pub vars: Vec<(String, PathBuf)>,
    /// The operator's files the links in the home point at (absolute
    /// paths, each existing when projected): a cage must let the harness
    /// read them, and only read them.
    pub carried: Vec<PathBuf>,
}

/// Why a `from` entry is not `$VAR` or `$VAR/relative/path`, if it is not.
pub fn check_source(from: &str) -> Result<(), ProjectionError> {
    let not_a_var = || ProjectionError::Setting(format!("`{from}` must start with `$VARIABLE`"));
    let Some(rest) = from.strip_prefix('$') else {
        return Err(not_a_var());
    };
    let (var, sub) = rest.split_once('/').unwrap_or((rest, ""));
    if !is_var_name(var) {
        return Err(not_a_var());
    }
    if !sub.is_empty() && relative_components(sub).is_err() {
        return Err(ProjectionError::Setting(format!(
            "`{from}`: what follows the variable must be a plain relative path"
        )));
    }
    Ok(())
}

/// An environment variable's name as the specs write them.
pub fn is_var_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

/// The operator's folder `from` names in `env`: the first entry whose
/// variable is set. A relative value is not used (the CLI would resolve
/// it against its own working folder, the workspace).
fn source(from: &[String], env: &BTreeMap<String, String>) -> Option<PathBuf> {
    for entry in from {
        let rest = entry.strip_prefix('$')?;
        let (var, sub) = rest.split_once('/').unwrap_or((rest, ""));
        let Some(value) = env.get(var).filter(|v| !v.is_empty()) else {
            continue;
        };
        let base = Path::new(value);
        if !base.is_absolute() {
            return None;
        }
        return Some(if sub.is_empty() {
            base.to_path_buf()
        } else {
            base.join(sub)
        });
    }
    None
}

/// The operator's sign-in files `home` carries into each conversation's
/// home, by `env` (the harness's environment): those that are there.
pub fn sign_ins(home: &Home, env: &BTreeMap<String, String>) -> Vec<PathBuf> {
    home.carry
        .iter()
        .filter_map(|carry| Some((carry, source(&carry.from, env)?)))
        .flat_map(|(carry, folder)| carry.sign_in.iter().map(move |file| folder.join(file)))
        .filter(|path| path.is_file())
        .collect()
}

/// `parts` split from `/`-separated `path` (empty for an empty path).
fn split(path: &str) -> Result<Vec<&str>, ProjectionError> {
    if path.is_empty() {
        Ok(Vec::new())
    } else {
        relative_components(path)
    }
}

/// The parts of `sub` inside the home.
fn under(sub: &str) -> Result<Vec<&str>, ProjectionError> {
    let mut parts: Vec<&str> = paths::HOME.to_vec();
    parts.extend(split(sub)?);
    Ok(parts)
}

/// Write the home in `ws`: its folders, its files, the links to the
/// operator's files that exist in `env` (the harness's environment
/// before the home replaces the operator's values), or, with `copies`,
/// to copies in that folder for the harness's user where it could not
/// read them.
pub(super) fn project_home(
    ws: &ConfinedDir,
    home: &Home,
    env: &BTreeMap<String, String>,
    copies: Option<(&Path, &crate::owner::Owner)>,
    report: &mut Report,
) -> Result<ProjectedHome, ProjectionError> {
    ws.ensure_dir(&paths::HOME)?;
    let path = ws.path().join(paths::HOME.join("/"));
    let mut vars = Vec::with_capacity(home.env.len());
    for (var, sub) in &home.env {
        // A CLI may refuse a home folder that is not there (Codex does).
        ws.ensure_dir(&under(sub)?)?;
        let value = if sub.is_empty() {
            path.clone()
        } else {
            path.join(sub)
        };
        vars.push((var.clone(), value));
    }
    for (file, text) in &home.files {
        let parts = under(file)?;
        let outcome = ws.write(&parts, text.as_bytes())?;
        report.file(parts.join("/"), outcome);
    }
    let mut carried = Vec::new();
    for carry in &home.carry {
        let folder = source(&carry.from, env)
            // The operator's folder inside the workspaces would be a link
            // to the workspace's own files.
            .filter(|folder| !folder.starts_with(ws.path()));
        for file in &carry.files {
            let mut parts = under(&carry.into)?;
            parts.extend(split(file)?);
            let target = folder.as_ref().map(|f| f.join(file)).filter(|target| {
                std::fs::metadata(target).is_ok_and(|m| m.is_file() || m.is_dir())
            });
            let target = match (target, copies) {
                (Some(target), Some((dir, owner))) => {
                    Some(super::carried::readable(&target, dir, owner)?)
                }
                (target, _) => target,
            };
            match target {
                Some(target) => {
                    let outcome = ws.symlink(&parts, &target)?;
                    report.file(parts.join("/"), outcome);
                    carried.push(target);
                }
                None => {
                    if ws.remove_link(&parts)? {
                        report.removed(parts.join("/"));
                    }
                }
            }
        }
    }
    Ok(ProjectedHome {
        path,
        vars,
        carried,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &Path)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string_lossy().into_owned()))
            .collect()
    }

    fn codex_home() -> Home {
        Home {
            env: vec![
                ("HOME".into(), String::new()),
                ("CODEX_HOME".into(), ".codex".into()),
            ],
            files: BTreeMap::new(),
            carry: vec![Carry {
                into: ".codex".into(),
                from: vec!["$CODEX_HOME".into(), "$HOME/.codex".into()],
                files: vec!["config.toml".into(), "auth.json".into()],
                sign_in: vec!["auth.json".into()],
            }],
        }
    }

    #[test]
    fn the_sign_ins_are_those_of_the_operators_folder_that_are_there() {
        let operator = tempfile::tempdir().unwrap();
        let codex = operator.path().join(".codex");
        std::fs::create_dir_all(&codex).unwrap();
        std::fs::write(codex.join("config.toml"), "").unwrap();
        let vars = env(&[("HOME", operator.path())]);
        assert!(sign_ins(&codex_home(), &vars).is_empty());
        std::fs::write(codex.join("auth.json"), "{}").unwrap();
        assert_eq!(sign_ins(&codex_home(), &vars), [codex.join("auth.json")]);
    }

    #[test]
    fn the_operators_files_are_linked_from_the_first_set_variable() {
        let root = tempfile::tempdir().unwrap();
        let operator = tempfile::tempdir().unwrap();
        let codex = operator.path().join("elsewhere");
        std::fs::create_dir_all(&codex).unwrap();
        std::fs::write(codex.join("config.toml"), "model = \"x\"\n").unwrap();
        // $HOME/.codex has one too: CODEX_HOME, being set, wins.
        std::fs::create_dir_all(operator.path().join(".codex")).unwrap();
        std::fs::write(operator.path().join(".codex/auth.json"), "{}").unwrap();
        let ws = ConfinedDir::create(root.path(), &["ws"], None).unwrap();
        let env = env(&[("HOME", operator.path()), ("CODEX_HOME", &codex)]);
        let mut report = Report::default();
        let home = project_home(&ws, &codex_home(), &env, None, &mut report).unwrap();
        let path = root.path().join("ws/.langbot/home");
        assert_eq!(home.path, path);
        assert_eq!(
            home.vars,
            [
                ("HOME".to_string(), path.clone()),
                ("CODEX_HOME".to_string(), path.join(".codex"))
            ]
        );
        assert_eq!(home.carried, [codex.join("config.toml")]);
        assert_eq!(
            std::fs::read_link(path.join(".codex/config.toml")).unwrap(),
            codex.join("config.toml")
        );
        assert!(!path.join(".codex/auth.json").exists());

        // CODEX_HOME unset: $HOME/.codex; the link to the other file goes.
        let env = super::tests::env(&[("HOME", operator.path())]);
        let mut report = Report::default();
        let home = project_home(&ws, &codex_home(), &env, None, &mut report).unwrap();
        assert_eq!(home.carried, [operator.path().join(".codex/auth.json")]);
        assert!(std::fs::symlink_metadata(path.join(".codex/config.toml")).is_err());
        assert_eq!(report.removed, [".langbot/home/.codex/config.toml"]);
    }

    #[test]
    fn sources_are_variables_and_relative_values_are_not_used() {
        assert!(check_source("$HOME/.config/opencode").is_ok());
        assert!(check_source("$XDG_DATA_HOME").is_ok());
        for bad in ["HOME/.x", "$home", "$HOME/../x", "$HOME//x", "$", "/etc"] {
            assert!(check_source(bad).is_err(), "{bad}");
        }
        let env: BTreeMap<String, String> = [("HOME".to_string(), "relative".to_string())].into();
        assert_eq!(source(&["$HOME/.codex".into()], &env), None);
        assert_eq!(source(&["$UNSET".into()], &env), None);
    }
}
