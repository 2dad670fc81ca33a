//! `doctor`'s `sign-in:` lines: for each harness installed here, where
//! its model key lives — held by the model gateway outside every cage, or
//! in sign-in files the bridge carries into each conversation's home,
//! where its agent can read them.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::harness::{AdapterSpec, Adapters, find_program};
use crate::serve::ServeConfig;

/// One line per harness installed here (the configured program, else
/// its binary on `PATH`), said for `env` (the bridge's environment);
/// `behind_door`: harnesses run behind their door, the gateway holding
/// their keys.
pub fn lines(
    config: Option<&ServeConfig>,
    env: &BTreeMap<String, String>,
    behind_door: bool,
) -> Vec<String> {
    let loaded;
    let adapters = match config.and_then(|c| c.adapters.as_deref()) {
        Some(dir) => match Adapters::load(dir) {
            Ok(found) => {
                loaded = found;
                &loaded
            }
            Err(e) => {
                return vec![format!(
                    "the harness specs in {} do not load: {e}",
                    dir.display()
                )];
            }
        },
        None => Adapters::builtin(),
    };
    let binaries = config.map(|c| &c.harness_binaries);
    adapters
        .all()
        .iter()
        .filter(|spec| {
            let wanted = binaries
                .and_then(|b| b.get(&spec.name))
                .map_or_else(|| spec.binary.clone(), |p| p.display().to_string());
            find_program(&wanted, env.get("PATH").map(String::as_str)).is_some()
        })
        .map(|spec| format!("{}: {}", spec.label, line(spec, env, behind_door)))
        .collect()
}

/// Where `spec`'s model key lives, and what to do about it.
fn line(spec: &AdapterSpec, env: &BTreeMap<String, String>, behind_door: bool) -> String {
    let could_hold = spec.key_vars();
    let keys: Vec<&str> = could_hold
        .iter()
        .copied()
        .filter(|var| env.get(*var).is_some_and(|v| !v.is_empty()))
        .collect();
    let files: Vec<PathBuf> = crate::projection::sign_ins(&spec.home, env);
    let carried = files
        .iter()
        .map(|f| f.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let key_line = |keys: &[&str]| {
        if behind_door {
            format!(
                "its key ({}) is held by the model gateway and never enters a cage",
                keys.join(", ")
            )
        } else {
            format!(
                "its key ({}) enters each cage: harnesses here have no network of their own, so no gateway holds it",
                keys.join(", ")
            )
        }
    };
    match (keys.is_empty(), files.is_empty()) {
        (false, true) => key_line(&keys),
        (false, false) => format!(
            "{}, but {carried} is carried into each conversation's home too, where its agent can read it: remove it if the key is what it signs in with",
            key_line(&keys)
        ),
        (true, false) if could_hold.is_empty() => format!(
            "it signs in with {carried}, carried into each conversation's home, where its agent can read it (the tokens can leave by what the agent may reach: its model, the destinations allowed)"
        ),
        (true, false) => format!(
            "it signs in with {carried}, carried into each conversation's home, where its agent can read it (the tokens can leave by what the agent may reach: its model, the destinations allowed); set {} for the bridge instead, and the gateway holds the key outside every cage",
            could_hold.join(" or ")
        ),
        (true, true) => format!(
            "no key and no sign-in found: {}",
            spec.sign_in.as_deref().unwrap_or(&spec.install_hint)
        ),
    }
}
