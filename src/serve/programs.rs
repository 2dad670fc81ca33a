//! The harness programs a configuration routes turns to — its
//! `default_harness`, the harnesses `harness_config` and
//! `harness_binaries` name — found as a turn finds them and startable in
//! the cage, checked before any turn: a missing or unreadable program is
//! said by `serve --check`, `doctor --config` and the start-up log, not
//! by the first person's turn.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::harness::cage::{Subject, unreadable};
use crate::harness::{AdapterSpec, Adapters, child_env, find_program};

use super::ServeConfig;

/// What was found of one harness's program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgramCheck {
    /// The harness's name.
    pub harness: String,
    /// Where its program is, when found.
    pub program: Option<PathBuf>,
    /// What is wrong, with the fix; `None`: a turn can start it.
    pub problem: Option<String>,
    /// Whether the operator gave its path (`harness_binaries`): a problem
    /// there is a mistake in the file, not a harness not installed.
    pub configured: bool,
}

impl ProgramCheck {
    /// The check in a line.
    pub fn line(&self) -> String {
        match (&self.problem, &self.program) {
            (Some(problem), _) => format!("{}: {problem}", self.harness),
            (None, Some(program)) => format!("{}: {}", self.harness, program.display()),
            (None, None) => format!("{}: found", self.harness),
        }
    }

    /// Whether `serve --check` fails on it: a path the operator gave that
    /// is not there, or a program the cage would not let start.
    pub fn fails_check(&self) -> bool {
        self.problem.is_some() && (self.configured || self.program.is_some())
    }
}

/// Every harness `config` routes turns to, checked; the workspaces under
/// `workspace_root`.
pub fn check_programs(
    config: &ServeConfig,
    adapters: &Adapters,
    workspace_root: &Path,
) -> Vec<ProgramCheck> {
    let routed: BTreeSet<&str> = std::iter::once(config.default_harness.as_str())
        .chain(config.harness_config.keys().map(String::as_str))
        .chain(config.harness_binaries.keys().map(String::as_str))
        .collect();
    let vars: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    routed
        .into_iter()
        .filter_map(|name| adapters.find(name))
        .map(|spec| check_one(config, spec, &vars, workspace_root))
        .collect()
}

fn check_one(
    config: &ServeConfig,
    spec: &AdapterSpec,
    vars: &[(String, String)],
    workspace_root: &Path,
) -> ProgramCheck {
    let env = child_env(
        &spec.env,
        &config.pass_env,
        &config.set_env,
        &BTreeMap::new(),
        vars,
    );
    let configured = config.harness_binaries.get(&spec.name);
    let wanted = configured.map_or_else(|| spec.binary.clone(), |p| p.display().to_string());
    let mut check = ProgramCheck {
        harness: spec.name.clone(),
        program: None,
        problem: None,
        configured: configured.is_some(),
    };
    let Some(program) = find_program(&wanted, env.get("PATH").map(String::as_str)) else {
        check.problem = Some(match configured {
            Some(path) => format!(
                "harness_binaries names {}, which is not an executable file there; {}",
                path.display(),
                spec.install_hint
            ),
            None => format!(
                "`{}` is not on the PATH its turns get, so its turns fail harness_not_found: {}",
                spec.binary, spec.install_hint
            ),
        });
        return check;
    };
    if config.cage.enabled {
        let workspace = workspace_root.join("a-conversation");
        let named = spec.named_paths();
        let subject = Subject {
            workspace: &workspace,
            program: &program,
            env: &env,
            carried: &[],
            named: &named,
            own_port: None,
            project: (&[], &[]),
        };
        let blocked = config
            .cage
            .plan(&subject)
            .and_then(|plan| unreadable(&plan, &config.cage.needs(&subject), &workspace));
        if let Some(blocked) = blocked {
            check.problem = Some(format!(
                "the cage would not let it start, as it would not let it read {}: {}",
                blocked.path.display(),
                blocked.fix()
            ));
        }
    }
    check.program = Some(program);
    check
}
