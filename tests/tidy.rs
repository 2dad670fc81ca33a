//! What lints cannot say about the source, checked by reading it: no
//! function grows past what a reader holds at once, harness processes
//! start in one place, and errors that cross a module boundary are typed.
//! Each check names the file and the function.

use std::path::{Path, PathBuf};

/// Longest function body, in lines, outside declarative tables.
const MAX_FUNCTION_LINES: usize = 100;

/// The declarative tables: functions that are one entry after another,
/// each read alone (file, function).
const TABLES: &[(&str, &str)] = &[
    // One registration per metric: its name, its help, its type.
    ("src/metrics.rs", "new"),
];

/// Where a process may be started: harnesses in one function; the cage's
/// probe (the bridge itself, `--version`, to learn whether a cgroup takes
/// a process); and git, which the bridge runs for a project's worktrees
/// with hooks and outside configuration off.
const SPAWNERS: &[&str] = &[
    "src/harness/spawn/mod.rs",
    // A child that only tries whether the kernel lets it take its own
    // part of a shared descriptor table, and ends.
    "src/harness/spawn/table.rs",
    // `clone3` into a cgroup, for the spawn function, and a child that
    // only tries whether the kernel allows it, and ends.
    "src/harness/spawn/clone3.rs",
    // A child born in a new user namespace that only waits while the
    // bridge writes its maps, and ends.
    "src/harness/spawn/userns.rs",
    "src/harness/cage/cgroup.rs",
    "src/repo/git.rs",
    // The operator's own command (a pull request), bridge-side by design.
    "src/repo/operator_command.rs",
];

/// One function found in a source file.
struct Function {
    file: String,
    name: String,
    line: usize,
    lines: usize,
    /// Its signature, up to the body.
    signature: String,
}

/// Every Rust file under `src/`, as `(relative path, text before its
/// tests)`: unit tests are held to no length.
fn sources() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    for entry in walkdir::WalkDir::new(root.join("src")) {
        let entry = entry.expect("the source tree reads");
        let path: PathBuf = entry.path().to_path_buf();
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("a source file reads");
        let body = text.split("#[cfg(test)]").next().unwrap_or("").to_string();
        let relative = path.strip_prefix(root).expect("under the checkout");
        found.push((relative.display().to_string(), body));
    }
    found.sort();
    found
}

/// A line with string and char literals blanked and its comment cut, for
/// counting braces.
fn code_of(line: &str) -> String {
    let mut out = String::new();
    let mut chars = line.chars().peekable();
    let mut in_string = false;
    while let Some(c) = chars.next() {
        if in_string {
            match c {
                '\\' => {
                    chars.next();
                }
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '/' if chars.peek() == Some(&'/') => break,
            '\'' => {
                // A char literal ('x', '\n', '{'), not a lifetime ('a).
                let rest: String = chars.clone().take(3).collect();
                if rest.starts_with('\\') {
                    let len = rest.find('\'').map_or(0, |i| i + 1);
                    for _ in 0..len {
                        chars.next();
                    }
                } else if rest.chars().nth(1) == Some('\'') {
                    chars.next();
                    chars.next();
                }
            }
            c => out.push(c),
        }
    }
    out
}

/// The functions of one file, with their length in lines.
fn functions(file: &str, text: &str) -> Vec<Function> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for (start, line) in lines.iter().enumerate() {
        let Some(name) = fn_name(line) else {
            continue;
        };
        let mut depth = 0i64;
        let mut opened = false;
        let mut signature = String::new();
        let mut end = start;
        for (n, line) in lines.iter().enumerate().skip(start) {
            let code = code_of(line);
            if !opened {
                signature.push_str(&code);
                signature.push(' ');
            }
            for c in code.chars() {
                match c {
                    '{' => {
                        depth += 1;
                        opened = true;
                    }
                    '}' => depth -= 1,
                    _ => {}
                }
            }
            end = n;
            if opened && depth <= 0 {
                break;
            }
            // A declaration without a body (a trait's).
            if !opened && code.trim_end().ends_with(';') {
                break;
            }
        }
        if opened {
            let signature = signature.split('{').next().unwrap_or("").to_string();
            found.push(Function {
                file: file.to_string(),
                name,
                line: start + 1,
                lines: end - start + 1,
                signature,
            });
        }
    }
    found
}

/// The name of the function a line declares, if it does.
fn fn_name(line: &str) -> Option<String> {
    let code = code_of(line);
    let trimmed = code.trim_start();
    let mut words = trimmed.split_whitespace().peekable();
    while let Some(word) = words.next() {
        match word {
            "pub" | "async" | "const" | "unsafe" | "extern" => continue,
            w if w.starts_with("pub(") => continue,
            "fn" => {
                let name: String = words
                    .next()?
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                return (!name.is_empty()).then_some(name);
            }
            _ => return None,
        }
    }
    None
}

#[test]
fn no_function_in_src_is_longer_than_a_reader_holds() {
    let mut long = Vec::new();
    let mut count = 0;
    for (file, text) in sources() {
        for f in functions(&file, &text) {
            count += 1;
            let table = TABLES
                .iter()
                .any(|(file, name)| f.file == *file && f.name == *name);
            if f.lines > MAX_FUNCTION_LINES && !table {
                long.push(format!(
                    "{}:{}: `{}` is {} lines (at most {MAX_FUNCTION_LINES}): cut it into steps with names",
                    f.file, f.line, f.name, f.lines
                ));
            }
        }
    }
    assert!(count > 500, "the functions were not found ({count})");
    assert!(long.is_empty(), "{}", long.join("\n"));
}

#[test]
fn string_errors_cross_no_module_boundary() {
    let mut found = Vec::new();
    for (file, text) in sources() {
        for f in functions(&file, &text) {
            let public = f.signature.trim_start().starts_with("pub");
            let string_error = f
                .signature
                .split("->")
                .nth(1)
                .is_some_and(|ret| ret.contains("Result<") && ret.contains(", String>"));
            if public && string_error {
                found.push(format!("{}::{}", f.file, f.name));
            }
        }
    }
    assert!(
        found.is_empty(),
        "public functions returning Result<_, String> (give them a typed error, \
         thiserror, as serve::JournalError or cli::CliError are):\n{}",
        found.join("\n")
    );
}

#[test]
fn processes_start_in_one_place() {
    let mut elsewhere = Vec::new();
    for (file, text) in sources() {
        if SPAWNERS.contains(&file.as_str()) {
            continue;
        }
        for (n, line) in text.lines().enumerate() {
            let code = code_of(line);
            if [
                "Command::new(",
                "posix_spawn",
                "libc::clone(",
                "SYS_clone3",
                "libc::fork(",
                "vfork(",
            ]
            .iter()
            .any(|call| code.contains(call))
            {
                elsewhere.push(format!("{file}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(
        elsewhere.is_empty(),
        "a process started outside src/harness/spawn/ (the one spawn function: \
         its own group, the parent-death signal, the cage's steps, no copy of the bridge):\n{}",
        elsewhere.join("\n")
    );
}

#[test]
fn the_library_denies_panics_and_prints() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = std::fs::read_to_string(root.join("src/lib.rs")).expect("src/lib.rs reads");
    let denied = lib
        .split("#![deny(")
        .nth(1)
        .and_then(|rest| rest.split(")]").next())
        .unwrap_or("");
    for lint in [
        "clippy::unwrap_used",
        "clippy::expect_used",
        "clippy::print_stdout",
        "clippy::print_stderr",
        "clippy::dbg_macro",
    ] {
        assert!(denied.contains(lint), "src/lib.rs no longer denies {lint}");
    }
    let allowed = std::fs::read_to_string(root.join("clippy.toml")).expect("clippy.toml reads");
    assert!(
        allowed.contains("allow-unwrap-in-tests = true"),
        "clippy.toml lets unit tests unwrap"
    );
}

#[test]
fn the_scanner_reads_functions_as_written() {
    let text = "fn a() {\n    let s = \"}\";\n    let c = '{';\n}\n\npub(crate) async fn b<'a>(x: &'a str) -> Result<(), String> {\n    // }\n    Ok(())\n}\ntrait T {\n    fn c(&self);\n}\n";
    let found = functions("x.rs", text);
    let names: Vec<(&str, usize)> = found.iter().map(|f| (f.name.as_str(), f.lines)).collect();
    assert_eq!(names, [("a", 4), ("b", 4)]);
    assert!(found[1].signature.contains("Result<(), String>"));
}

/// Where `unsafe` may be written: the modules that make system calls
/// no safe crate makes for them (each says so with its own
/// `#![allow(unsafe_code, reason = …)]`); everywhere else the workspace's
/// `unsafe_code = "deny"` fails the build.
const UNSAFE_ALLOWED: &[&str] = &[
    // The spawn function: clone3/vfork, the descriptor table, the
    // child's steps before exec (and its submodules).
    "src/harness/spawn/mod.rs",
    // The cage's steps in the child: cgroups, Landlock and seccomp, the
    // door's socket in the child's namespace.
    "src/harness/cage/cgroup.rs",
    "src/harness/cage/wall.rs",
    "src/harness/cage/door.rs",
    // A folder's access list, by the *xattr calls.
    "src/owner/acl.rs",
    // The spawn bench's step before exec.
    "benches/spawn.rs",
];

#[test]
fn unsafe_is_allowed_only_where_it_is_proven() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    for folder in ["src", "tests", "benches", "fuzz"] {
        for entry in walkdir::WalkDir::new(root.join(folder))
            .into_iter()
            .filter_entry(|e| e.file_name() != "node_modules" && e.file_name() != "target")
        {
            let entry = entry.expect("the tree reads");
            if entry.path().extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let text = std::fs::read_to_string(entry.path()).expect("a source file reads");
            let flat: String = text.split_whitespace().collect();
            if flat.contains("allow(unsafe_code") {
                let relative = entry.path().strip_prefix(root).expect("under the root");
                found.push(relative.to_string_lossy().into_owned());
            }
        }
    }
    found.sort();
    let mut allowed: Vec<String> = UNSAFE_ALLOWED.iter().map(|s| s.to_string()).collect();
    allowed.sort();
    // This file names the attribute in its words, not as one.
    found.retain(|f| f != "tests/tidy.rs");
    assert_eq!(
        found, allowed,
        "`unsafe` is allowed elsewhere than the proven modules: list a new one in \
         UNSAFE_ALLOWED with why, or write it safely"
    );
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("Cargo.toml reads");
    for lint in [
        "unsafe_code = \"deny\"",
        "undocumented_unsafe_blocks = \"deny\"",
        "missing_safety_doc = \"deny\"",
    ] {
        assert!(
            manifest.contains(lint),
            "Cargo.toml's workspace lints lack {lint}"
        );
    }
}

/// The lints a `[workspace.lints…]` table of `manifest` sets, in order.
fn workspace_lints(manifest: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut within = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            within = line.starts_with("[workspace.lints");
        }
        if within && !line.is_empty() && !line.starts_with('#') {
            lines.push(line.to_string());
        }
    }
    lines
}

#[test]
fn the_fuzz_targets_are_held_to_the_workspaces_lints() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |path: &str| std::fs::read_to_string(root.join(path)).expect("a manifest reads");
    let ours = workspace_lints(&read("Cargo.toml"));
    assert!(ours.len() > 3, "{ours:?}");
    assert_eq!(workspace_lints(&read("fuzz/Cargo.toml")), ours);
    for member in ["Cargo.toml", "tests/common/Cargo.toml", "fuzz/Cargo.toml"] {
        assert!(
            read(member).contains("[lints]\nworkspace = true"),
            "{member} does not take the workspace's lints"
        );
    }
}
