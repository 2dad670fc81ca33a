//! Skills: the binding's skill bodies written where the harness finds them
//! (`.claude/skills/<name>/` for Claude Code, `.agents/skills/<name>/` for
//! Codex), with a manifest so the bridge removes exactly the skills it wrote
//! and no longer authorizes, and touches nothing else: a skill folder it
//! did not write (a project's own, tracked in its repository) is skipped,
//! with a warning, rather than overwritten.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::confined::{ConfinedDir, WriteOutcome};
use super::names::{check_skill_name, relative_components};
use super::{ProjectionError, Report, SkillSpec};
use crate::protocol::SkillResource;

/// Largest skill file, in bytes.
pub const MAX_FILE_BYTES: usize = 1024 * 1024;
/// Largest skill (all files), in bytes.
pub const MAX_SKILL_BYTES: usize = 8 * 1024 * 1024;
/// Most files in one skill.
pub const MAX_FILES: usize = 100;

const MANIFEST: [&str; 2] = [".langbot", "skills.json"];

/// Names a harness reads as its own configuration or credentials, refused
/// anywhere in a skill (any case). Skills come from the binding, which a
/// less trusted client can write, and a skill folder can be where an
/// environment variable points a harness for its configuration (Codex's
/// `CODEX_HOME`, Claude Code's `CLAUDE_CONFIG_DIR`): such a file in a skill
/// would choose the harness's tools, hooks, servers or accounts, which is
/// the operator's to choose. Hooks run commands, so a hooks folder (or
/// file) is refused too.
const HARNESS_OWN_NAMES: [&str; 11] = [
    "config.toml",
    "settings.json",
    "settings.local.json",
    ".mcp.json",
    "mcp.json",
    ".claude.json",
    "auth.json",
    ".credentials.json",
    ".env",
    "hooks",
    "hooks.json",
];

/// The first part of a skill path a harness would read as its own
/// configuration, if any.
fn harness_own_name<'a>(parts: &[&'a str]) -> Option<&'a str> {
    parts.iter().copied().find(|part| {
        HARNESS_OWN_NAMES
            .iter()
            .any(|n| part.eq_ignore_ascii_case(n))
    })
}

/// What the manifest remembers of one written skill.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkillRecord {
    /// Digest of the skill's name, files and contents.
    pub sha256: String,
    /// Relative file paths and their sizes.
    pub files: BTreeMap<String, u64>,
}

/// `.langbot/skills.json`: which skills the bridge wrote, and where.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkillManifest {
    /// The harness's skills folder, relative to the workspace.
    pub dir: String,
    /// Skill name → what was written.
    pub skills: BTreeMap<String, SkillRecord>,
}

/// A skill ready to write: checked name, files with their bytes.
struct Prepared<'a> {
    name: String,
    files: Vec<(String, Cow<'a, [u8]>)>,
    record: SkillRecord,
}

fn prepare<'a>(
    spec: &'a SkillSpec<'_>,
    facts: &[SkillResource],
) -> Result<Prepared<'a>, ProjectionError> {
    let name = check_skill_name(&spec.name)?.to_string();
    if harness_own_name(&[&name]).is_some() {
        return Err(ProjectionError::Binding(format!(
            "skill `{name}`: a harness reads a folder of that name as its own configuration"
        )));
    }
    let fact = facts.iter().find(|f| f.skill_name == name);
    let description = spec
        .description
        .clone()
        .or_else(|| fact.and_then(|f| f.description.clone()))
        .or_else(|| fact.and_then(|f| f.display_name.clone()))
        .unwrap_or_else(|| format!("The {name} skill."));
    let skill_md: Cow<'a, [u8]> = if spec.content.starts_with("---") {
        Cow::Borrowed(spec.content.as_bytes())
    } else {
        // A JSON string is a valid YAML double-quoted scalar: the
        // description needs no YAML serializer to be quoted safely.
        let quoted = serde_json::to_string(description.trim()).unwrap_or_else(|_| "\"\"".into());
        let front = format!("name: {name}\ndescription: {quoted}\n");
        Cow::Owned(format!("---\n{front}---\n\n{}\n", spec.content.trim_end()).into_bytes())
    };
    let mut files = vec![("SKILL.md".to_string(), skill_md)];
    for (path, content) in &spec.files {
        if let Some(own) = harness_own_name(&relative_components(path)?) {
            return Err(ProjectionError::Binding(format!(
                "skill `{name}`: `{path}` is refused: a harness reads `{own}` as its own configuration or credentials"
            )));
        }
        if path.eq_ignore_ascii_case("SKILL.md") {
            return Err(ProjectionError::Binding(format!(
                "skill `{name}`: put SKILL.md's text in `content`, not in `files`"
            )));
        }
        files.push((path.clone(), Cow::Borrowed(content.as_bytes())));
    }
    if files.len() > MAX_FILES {
        return Err(ProjectionError::Binding(format!(
            "skill `{name}` has more than {MAX_FILES} files"
        )));
    }
    let mut hasher = Sha256::new();
    let mut total = 0;
    for (path, bytes) in &files {
        if bytes.len() > MAX_FILE_BYTES {
            return Err(ProjectionError::Binding(format!(
                "skill `{name}`: `{path}` is larger than {MAX_FILE_BYTES} bytes"
            )));
        }
        total += bytes.len();
        hasher.update((path.len() as u64).to_le_bytes());
        hasher.update(path.as_bytes());
        hasher.update((bytes.len() as u64).to_le_bytes());
        hasher.update(bytes);
    }
    if total > MAX_SKILL_BYTES {
        return Err(ProjectionError::Binding(format!(
            "skill `{name}` is larger than {MAX_SKILL_BYTES} bytes"
        )));
    }
    let record = SkillRecord {
        sha256: hex::encode(hasher.finalize()),
        files: files
            .iter()
            .map(|(p, b)| (p.clone(), b.len() as u64))
            .collect(),
    };
    Ok(Prepared {
        name,
        files,
        record,
    })
}

/// Whether an error is the operator's input (skip that skill, warn) rather
/// than the workspace refusing (stop the projection).
fn is_input_error(err: &ProjectionError) -> bool {
    matches!(
        err,
        ProjectionError::UnsafePath { .. } | ProjectionError::Binding(_)
    )
}

/// Every skill checked and made ready; one that cannot be (or is listed
/// twice) is skipped with a warning, the others go on.
fn prepare_all<'a>(
    specs: &'a [SkillSpec<'_>],
    facts: &[SkillResource],
    report: &mut Report,
) -> Result<Vec<Prepared<'a>>, ProjectionError> {
    let mut ready: Vec<Prepared> = Vec::with_capacity(specs.len());
    for spec in specs {
        match prepare(spec, facts) {
            Ok(p) if ready.iter().any(|r| r.name == p.name) => {
                report.warn(format!(
                    "skill `{}` is listed twice; the first one is used",
                    p.name
                ));
            }
            Ok(p) => ready.push(p),
            Err(e) if is_input_error(&e) => {
                report.warn(format!("skill `{}` skipped: {e}", spec.name.escape_debug()));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(ready)
}

/// Skills the bridge wrote before and no longer authorizes (or that sit
/// in another harness's folder now): exactly those folders removed. The
/// old manifest lives in the workspace, where the harness could edit it:
/// its paths pass the same checks as any path from outside.
fn remove_unauthorized(
    ws: &ConfinedDir,
    old: &SkillManifest,
    manifest: &SkillManifest,
    report: &mut Report,
) -> Result<(), ProjectionError> {
    let old_dir = relative_components(&old.dir).unwrap_or_default();
    for name in old.skills.keys() {
        let gone = old.dir != manifest.dir || !manifest.skills.contains_key(name);
        if gone && !old_dir.is_empty() && check_skill_name(name).is_ok() {
            let parts: Vec<&str> = old_dir.iter().copied().chain([name.as_str()]).collect();
            ws.remove(&parts)?;
            report.removed(parts.join("/"));
        }
    }
    Ok(())
}

/// The files of a skill's `previous` version that its new `record` no
/// longer has, removed from its folder `base`.
fn remove_dropped_files(
    ws: &ConfinedDir,
    base: &[&str],
    previous: &SkillRecord,
    record: &SkillRecord,
    report: &mut Report,
) -> Result<(), ProjectionError> {
    for path in previous
        .files
        .keys()
        .filter(|p| !record.files.contains_key(*p))
    {
        let parts: Vec<&str> = base.iter().copied().chain(path.split('/')).collect();
        ws.remove(&parts)?;
        report.removed(format!("{}/{}", base.join("/"), path));
    }
    Ok(())
}

/// Write the authorized skills into `skills_dir`, remove the ones the
/// bridge wrote before and no longer authorizes, and update the manifest.
pub fn project(
    ws: &ConfinedDir,
    skills_dir: &[&str],
    specs: &[SkillSpec<'_>],
    facts: &[SkillResource],
    report: &mut Report,
) -> Result<Vec<String>, ProjectionError> {
    let dir_name = skills_dir.join("/");
    let old: SkillManifest = ws
        .read(&MANIFEST)?
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default();
    let mut manifest = SkillManifest {
        dir: dir_name.clone(),
        skills: BTreeMap::new(),
    };

    let ready = prepare_all(specs, facts, report)?;

    // One pass over the disk for every file of every skill: which are
    // still there with the size the manifest recorded.
    let wanted: Vec<String> = ready
        .iter()
        .flat_map(|p| {
            p.files
                .iter()
                .map(move |(path, _)| format!("{}/{path}", p.name))
        })
        .collect();
    let wanted_refs: Vec<&str> = wanted.iter().map(String::as_str).collect();
    let mut sizes = ws.file_lens(skills_dir, &wanted_refs)?.into_iter();
    // What the skills folder holds that the bridge did not write (a
    // project's own skills, tracked in its repository, or the harness's):
    // never overwritten, so never removed either. Looked for only when a
    // skill is new to the manifest (a later turn's usual case reads
    // nothing more).
    let ours = |name: &str| old.dir == dir_name && old.skills.contains_key(name);
    let theirs: Vec<String> = match ready.iter().all(|p| ours(&p.name)) {
        true => Vec::new(),
        false => ws
            .list(skills_dir)?
            .into_iter()
            .map(|entry| entry.name)
            .filter(|name| !ours(name))
            .collect(),
    };

    for prepared in ready {
        let base: Vec<&str> = skills_dir
            .iter()
            .copied()
            .chain([prepared.name.as_str()])
            .collect();
        let on_disk: Vec<Option<u64>> = sizes.by_ref().take(prepared.files.len()).collect();
        if theirs.contains(&prepared.name) {
            report.warn(format!(
                "skill `{}` skipped: {} is already in the workspace and not the bridge's \
                 (the project's own, or the harness's); it is left as it is",
                prepared.name,
                base.join("/")
            ));
            continue;
        }
        let previous = old
            .skills
            .get(&prepared.name)
            .filter(|_| old.dir == dir_name);
        // Unchanged since the last projection and every file still there
        // with its size: nothing to read or write.
        let same = previous.is_some_and(|r| r.sha256 == prepared.record.sha256)
            && prepared
                .files
                .iter()
                .zip(&on_disk)
                .all(|((_, b), size)| *size == Some(b.len() as u64));
        // Files of the old version that the new one no longer has.
        if let Some(previous) = previous {
            remove_dropped_files(ws, &base, previous, &prepared.record, report)?;
        }
        for (path, bytes) in &prepared.files {
            let rel = format!("{}/{path}", base.join("/"));
            if same {
                report.file(rel, WriteOutcome::Unchanged);
                continue;
            }
            let parts: Vec<&str> = base.iter().copied().chain(path.split('/')).collect();
            let outcome = ws.write(&parts, bytes)?;
            report.file(rel, outcome);
        }
        manifest.skills.insert(prepared.name, prepared.record);
    }

    remove_unauthorized(ws, &old, &manifest, report)?;
    let mut bytes = serde_json::to_vec_pretty(&manifest).unwrap_or_default();
    bytes.push(b'\n');
    let outcome = ws.write(&MANIFEST, &bytes)?;
    report.file(MANIFEST.join("/"), outcome);
    Ok(manifest.skills.into_keys().collect())
}
