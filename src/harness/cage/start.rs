//! What a harness must read to start — its program, the interpreter its
//! `#!` line names, the files its command line names — and, before any
//! launch, which of those its wall would not let it read, with the
//! setting that changes that: a start the cage refuses is said in words,
//! never as the `Permission denied` of an `exec` or the `Broken pipe` of
//! a process that died before it read anything.

use std::io::Read as _;
use std::path::{Path, PathBuf};

use super::wall::{Plan, installation};

/// The longest `#!` line read.
const SHEBANG_BYTES: usize = 256;

/// The files a harness must read to start: `program`, the interpreter
/// its `#!` line names (through `env`, looked up on `path_var`), and the
/// existing files or folders its command line names (`named`).
pub fn needs(program: &Path, named: &[PathBuf], path_var: Option<&str>) -> Vec<PathBuf> {
    let mut needs = vec![program.to_path_buf()];
    needs.extend(interpreter(program, path_var));
    needs.extend(named.iter().filter(|path| path.exists()).cloned());
    needs
}

/// The interpreter `program` names in its `#!` line, when it is a script.
fn interpreter(program: &Path, path_var: Option<&str>) -> Option<PathBuf> {
    let mut head = [0u8; SHEBANG_BYTES];
    let read = std::fs::File::open(program).ok()?.read(&mut head).ok()?;
    let line = head[..read].strip_prefix(b"#!")?;
    let line = String::from_utf8_lossy(line);
    let mut words = line.lines().next()?.split_whitespace();
    let first = PathBuf::from(words.next()?);
    if first.file_name().is_none_or(|name| name != "env") {
        return Some(first);
    }
    let name = words.find(|word| !word.starts_with('-'))?;
    if name.contains('/') {
        return Some(PathBuf::from(name));
    }
    std::env::split_paths(path_var?)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// A file a harness needs that its wall would not let it read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    /// The file, as the launch names it.
    pub path: PathBuf,
    /// The folder the wall would open for it.
    pub folder: PathBuf,
    /// Whether that folder holds the conversations' workspaces (no
    /// harness may read it whole).
    pub holds_workspaces: bool,
}

impl Unreadable {
    /// What the operator does about it, naming the setting.
    pub fn fix(&self) -> String {
        if self.holds_workspaces {
            format!(
                "it is in {}, which holds the conversations' workspaces, and no harness may read \
                 that folder whole: install it elsewhere (e.g. under /opt or /usr/local) and point \
                 `harness_binaries` (or the spec's command) there",
                self.folder.display()
            )
        } else {
            format!(
                "add {} to `cage.read_only` in bridge.yaml (or install it under /usr, /opt or a \
                 folder on the harness's PATH)",
                self.folder.display()
            )
        }
    }
}

/// The first of `needs` that `plan` does not let the harness read, for a
/// harness whose workspace is `workspace`.
pub fn unreadable(plan: &Plan, needs: &[PathBuf], workspace: &Path) -> Option<Unreadable> {
    let real = |path: &Path| path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    let open: Vec<PathBuf> = plan
        .read_only
        .iter()
        .chain(&plan.read_write)
        .map(|dir| real(dir))
        .collect();
    let workspace = real(workspace);
    needs.iter().find_map(|path| {
        let target = real(path);
        if open.iter().any(|dir| target.starts_with(dir)) {
            return None;
        }
        let folder = installation(path);
        Some(Unreadable {
            path: path.clone(),
            holds_workspaces: workspace.starts_with(real(&folder)),
            folder,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(read_only: &[&Path]) -> Plan {
        Plan {
            read_write: Vec::new(),
            read_only: read_only.iter().map(|p| p.to_path_buf()).collect(),
            connect: None,
            bind: Default::default(),
            own_network: false,
        }
    }

    #[test]
    fn a_script_needs_its_interpreter_and_the_files_its_command_names() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let node = bin.join("node");
        std::fs::write(&node, "").unwrap();
        let script = dir.path().join("agent");
        std::fs::write(&script, "#!/usr/bin/env -S node --flag\n").unwrap();
        let named = [dir.path().join("index.js"), dir.path().join("absent.js")];
        std::fs::write(&named[0], "").unwrap();
        let path_var = bin.display().to_string();
        assert_eq!(
            needs(&script, &named, Some(&path_var)),
            [script.clone(), node, named[0].clone()]
        );
        std::fs::write(&script, "#!/opt/python/bin/python3 -u\n").unwrap();
        assert_eq!(
            needs(&script, &[], None),
            [script.clone(), PathBuf::from("/opt/python/bin/python3")]
        );
        std::fs::write(&script, "\x7fELF").unwrap();
        assert_eq!(needs(&script, &[], None), [script]);
    }

    #[test]
    fn what_the_wall_leaves_out_is_named_with_its_fix() {
        let data = tempfile::tempdir().unwrap();
        let workspace = data.path().join("workspaces").join("c1");
        std::fs::create_dir_all(&workspace).unwrap();
        let program = data.path().join("claude");
        std::fs::write(&program, "").unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let tool = elsewhere.path().join("tool");
        std::fs::write(&tool, "").unwrap();

        let wall = plan(&[Path::new("/usr")]);
        let inside = unreadable(&wall, std::slice::from_ref(&program), &workspace).unwrap();
        assert!(inside.holds_workspaces);
        assert!(
            inside.fix().contains("harness_binaries"),
            "{}",
            inside.fix()
        );
        let outside = unreadable(&wall, std::slice::from_ref(&tool), &workspace).unwrap();
        assert!(!outside.holds_workspaces);
        assert!(
            outside.fix().contains("cage.read_only"),
            "{}",
            outside.fix()
        );
        assert_eq!(
            unreadable(&plan(&[elsewhere.path()]), &[tool], &workspace),
            None
        );
    }
}
