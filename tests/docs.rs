//! The documents name only what exists. README.md, ARCHITECTURE.md,
//! BENCHMARKS.md, FUZZING.md, CHANGELOG.md, tests/README.md and every
//! docs/**/*.md are read, and this fails, naming the document, the line
//! and what is missing, when one names:
//!
//! - a repository path (`src/…`, `tests/…`, `docs/…`, `scripts/…`, …) or a
//!   relative Markdown link that does not exist;
//! - a test binary (`cargo test --test X`) or bench (`--bench X`) that
//!   does not exist;
//! - a function or item (`tests/x.rs::a_test`, `src/run/mod.rs::Bridge::run`)
//!   that is not in the file it names;
//! - a `harness-bridge <command>` (in code) that the built binary's `--help`
//!   does not list.
//!
//! And ARCHITECTURE.md's layer table must be `tests/layers.rs`'s layers,
//! each of its invariants must name a test, and tests/README.md must have
//! a row for every test binary. Fast, and needs nothing but the checkout.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The folders whose paths a document may name, checked for existence.
const PREFIXES: &[&str] = &[
    "src/",
    "tests/",
    "docs/",
    "scripts/",
    "benches/",
    "fuzz/",
    "harness-adapters/",
    "integrations/",
    "examples/",
    "templates/",
    "projections/",
    "packaging/",
];

fn checkout() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The documents, as paths relative to the checkout.
fn documents() -> Vec<String> {
    let root = checkout();
    let mut docs: Vec<String> = [
        "README.md",
        "ARCHITECTURE.md",
        "BENCHMARKS.md",
        "FUZZING.md",
        "tests/README.md",
        "CHANGELOG.md",
    ]
    .iter()
    .map(|d| d.to_string())
    .collect();
    for entry in walkdir::WalkDir::new(root.join("docs")).sort_by_file_name() {
        let entry = entry.expect("docs/ reads");
        if entry.path().extension().is_some_and(|e| e == "md") {
            let relative = entry
                .path()
                .strip_prefix(&root)
                .expect("under the checkout");
            docs.push(relative.display().to_string());
        }
    }
    docs
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(checkout().join(relative))
        .unwrap_or_else(|e| panic!("{relative} does not read: {e}"))
}

/// A problem: which document, which line (1-based), what is wrong.
struct Problems(Vec<String>);

impl Problems {
    fn add(&mut self, doc: &str, line: usize, what: String) {
        self.0.push(format!("{doc}:{line}: {what}"));
    }
}

fn is_path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "_.-/".contains(c)
}

/// Characters that, right before a prefix, make it part of something else
/// (`/tmp/x/src/…`, `a-src/`, `$HOME/docs/`).
fn joins(c: char) -> bool {
    c.is_ascii_alphanumeric() || "_.-/~$@".contains(c)
}

/// Markers of a placeholder inside a path (`docs/harnesses/<cli>.md`,
/// `harness-adapters/*.yaml`, `src/{top}`): the folder before it is checked.
fn placeholder(c: char) -> bool {
    "<*{[…".contains(c)
}

/// The repository paths a line names: (the path as written, the part to
/// check: the path itself, or the folder before a placeholder).
fn paths_in(line: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let chars: Vec<(usize, char)> = line.char_indices().collect();
    for (i, &(at, _)) in chars.iter().enumerate() {
        let rest = &line[at..];
        if !PREFIXES.iter().any(|p| rest.starts_with(p)) {
            continue;
        }
        if i > 0 && joins(chars[i - 1].1) {
            continue;
        }
        let len: usize = rest
            .chars()
            .take_while(|c| is_path_char(*c))
            .map(char::len_utf8)
            .sum();
        let written = &rest[..len];
        let next = rest[len..].chars().next();
        let checked = if next.is_some_and(placeholder) {
            match written.rfind('/') {
                Some(slash) => written[..=slash].to_string(),
                None => continue,
            }
        } else {
            written.trim_end_matches(['.', ',', ':', ';']).to_string()
        };
        // Installed, not in the repository: its folder is what is named.
        let checked = match checked.find("/node_modules") {
            Some(cut) => checked[..cut].to_string(),
            None => checked,
        };
        found.push((written.to_string(), checked));
    }
    found
}

/// Relative Markdown link targets of a line (`[x](docs/a.md#part)`).
fn links_in(line: &str) -> Vec<String> {
    line.split("](")
        .skip(1)
        .filter_map(|rest| rest.split([')', ' ']).next())
        .filter(|target| {
            !target.is_empty()
                && !target.starts_with('#')
                && !target.contains("://")
                && !target.starts_with("mailto:")
        })
        .map(|target| target.split('#').next().unwrap_or_default().to_string())
        .collect()
}

/// The names after `flag ` on a line (`--test docs`), plain words only.
fn flag_values(line: &str, flag: &str) -> Vec<String> {
    line.split(flag)
        .skip(1)
        .filter_map(|rest| {
            let word: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
                .collect();
            (!word.is_empty()).then_some(word)
        })
        .collect()
}

/// `[[kind]] name = "…"` entries of Cargo.toml (`test`, `bench`).
fn cargo_targets(kind: &str) -> BTreeSet<String> {
    let manifest = read("Cargo.toml");
    let header = format!("[[{kind}]]");
    let mut names = BTreeSet::new();
    let mut inside = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            inside = line == header;
        } else if inside && let Some(value) = line.strip_prefix("name") {
            let name = value.trim_start_matches([' ', '=']).trim_matches('"');
            names.insert(name.to_string());
        }
    }
    names
}

/// The `PATH.rs::item::path` references of a line: (file, item path).
fn items_in(line: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = line[from..].find(".rs::") {
        let end_of_file = from + at + ".rs".len();
        let start = line[..end_of_file]
            .rfind(|c: char| !is_path_char(c))
            .map_or(0, |i| {
                i + line[i..].chars().next().map_or(1, char::len_utf8)
            });
        let file = &line[start..end_of_file];
        let item: String = line[end_of_file + 2..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || "_:*".contains(*c))
            .collect();
        let item = item.trim_end_matches(':').to_string();
        if PREFIXES.iter().any(|p| file.starts_with(p)) && !item.is_empty() {
            found.push((file.to_string(), item));
        }
        from = end_of_file + 2;
    }
    found
}

/// Whether `word` occurs in `text` as a whole identifier after `before`.
fn defines(text: &str, before: &str, word: &str) -> bool {
    let needle = format!("{before}{word}");
    text.match_indices(&needle).any(|(at, _)| {
        let after = text[at + needle.len()..].chars().next();
        let ahead = text[..at].chars().last();
        !after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
            && !ahead.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// What is wrong with `item` as a path into `source`, if anything.
fn missing_item(source: &str, item: &str) -> Option<String> {
    let segments: Vec<&str> = item.split("::").collect();
    let (last, owners) = segments.split_last()?;
    for owner in owners {
        let owned = source
            .lines()
            .any(|l| l.contains("impl") && defines(l, "", owner))
            || ["struct ", "enum ", "trait ", "mod "]
                .iter()
                .any(|kind| defines(source, kind, owner));
        if !owned {
            return Some(format!("no `{owner}` with items"));
        }
    }
    if let Some(prefix) = last.strip_suffix('*') {
        let any = source
            .match_indices(&format!("fn {prefix}"))
            .next()
            .is_some();
        return (!any).then(|| format!("no function starting `{prefix}`"));
    }
    let lowercase = last.starts_with(|c: char| c.is_ascii_lowercase() || c == '_');
    let kinds: &[&str] = if lowercase {
        &["fn "]
    } else {
        &[
            "struct ", "enum ", "trait ", "type ", "const ", "static ", "union ",
        ]
    };
    let found = kinds.iter().any(|kind| defines(source, kind, last));
    (!found).then(|| {
        if lowercase {
            format!("no function `{last}`")
        } else {
            format!("no item `{last}`")
        }
    })
}

/// The commands a `--help` lists under `Commands:` (without `help`).
fn commands(help: &str) -> BTreeSet<String> {
    help.lines()
        .skip_while(|l| l.trim() != "Commands:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect()
}

fn help_of(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_harness-bridge"))
        .args(args)
        .arg("--help")
        .output()
        .expect("harness-bridge runs");
    assert!(
        out.status.success(),
        "harness-bridge {args:?} --help failed"
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The binary's commands and, for those that have them, their commands.
struct Cli {
    top: BTreeSet<String>,
    sub: BTreeMap<String, BTreeSet<String>>,
}

impl Cli {
    fn load() -> Cli {
        let top = commands(&help_of(&[]));
        assert!(
            top.contains("run") && top.contains("serve"),
            "harness-bridge --help lists no commands: {top:?}"
        );
        let sub = top
            .iter()
            .map(|c| (c.clone(), commands(&help_of(&[c]))))
            .collect();
        Cli { top, sub }
    }

    /// What is wrong with the words after `harness-bridge `, if anything.
    fn check(&self, after: &str) -> Option<String> {
        let word = |text: &str| -> String {
            text.chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-')
                .collect()
        };
        if !after.starts_with(|c: char| c.is_ascii_lowercase()) {
            return None;
        }
        let command = word(after);
        if !self.top.contains(&command) {
            return Some(format!(
                "`harness-bridge {command}`: the binary has no command `{command}` (it has: {})",
                self.top.iter().cloned().collect::<Vec<_>>().join(", ")
            ));
        }
        let subs = &self.sub[&command];
        if subs.is_empty() {
            return None;
        }
        let rest = after[command.len()..].trim_start_matches(' ');
        if !rest.starts_with(|c: char| c.is_ascii_lowercase()) {
            return None;
        }
        let mut said = rest
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .split('|');
        said.find(|s| {
            let s = word(s);
            !s.is_empty() && !subs.contains(&s)
        })
        .map(|s| {
            format!(
                "`harness-bridge {command} {}`: `{command}` has no command `{}` (it has: {})",
                word(s),
                word(s),
                subs.iter().cloned().collect::<Vec<_>>().join(", ")
            )
        })
    }
}

/// The code of a document: (line, text) for inline code spans, fenced
/// blocks and indented code lines.
fn code_of(text: &str) -> Vec<(usize, String)> {
    let mut code = Vec::new();
    let mut fenced = false;
    let mut prose = String::new();
    let mut starts = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced || (line.starts_with("    ") && line.trim_start().starts_with("harness-bridge "))
        {
            code.push((n + 1, line.to_string()));
            continue;
        }
        starts.push((prose.len(), n + 1));
        prose.push_str(line);
        prose.push('\n');
    }
    // Inline spans may run over a line break: pair backticks over the prose.
    let line_at = |offset: usize| {
        let i = starts.partition_point(|(start, _)| *start <= offset);
        starts[i.saturating_sub(1)].1
    };
    let mut parts = prose.split('`');
    let mut offset = 0;
    let mut inside = false;
    for part in parts.by_ref() {
        if inside {
            code.push((line_at(offset), part.replace('\n', " ")));
        }
        offset += part.len() + 1;
        inside = !inside;
    }
    code
}

/// `harness-bridge <words>` in code, at a word's start.
fn invocations(code: &str) -> Vec<&str> {
    code.match_indices("harness-bridge ")
        .filter(|(at, _)| !code[..*at].chars().last().is_some_and(joins))
        .map(|(at, m)| &code[at + m.len()..])
        .collect()
}

#[test]
fn documents_name_only_what_exists() {
    let root = checkout();
    let cli = Cli::load();
    let mut tests: BTreeSet<String> = cargo_targets("test");
    let mut benches: BTreeSet<String> = cargo_targets("bench");
    for (folder, set) in [("tests", &mut tests), ("benches", &mut benches)] {
        for entry in std::fs::read_dir(root.join(folder)).expect("reads") {
            let path = entry.expect("reads").path();
            if path.extension().is_some_and(|e| e == "rs") {
                set.insert(path.file_stem().unwrap().to_string_lossy().into_owned());
            }
        }
    }
    let mut problems = Problems(Vec::new());
    let docs = documents();
    assert!(docs.len() >= 10, "the documents were not found: {docs:?}");
    for doc in &docs {
        let text = read(doc);
        let folder = Path::new(doc).parent().unwrap_or(Path::new(""));
        for (n, line) in text.lines().enumerate() {
            let n = n + 1;
            for (written, checked) in paths_in(line) {
                if !root.join(&checked).exists() {
                    problems.add(doc, n, format!("names `{written}`, which does not exist"));
                }
            }
            for target in links_in(line) {
                if !root.join(folder).join(&target).exists() {
                    problems.add(doc, n, format!("links to `{target}`, which does not exist"));
                }
            }
            for name in flag_values(line, "--test ") {
                if !tests.contains(&name) {
                    problems.add(doc, n, format!("names test binary `{name}` (`cargo test --test {name}`), which does not exist in tests/"));
                }
            }
            for name in flag_values(line, "--bench ") {
                if !benches.contains(&name) {
                    problems.add(doc, n, format!("names bench `{name}` (`--bench {name}`), which does not exist in benches/"));
                }
            }
            for (file, item) in items_in(line) {
                let Ok(source) = std::fs::read_to_string(root.join(&file)) else {
                    problems.add(
                        doc,
                        n,
                        format!("names `{file}::{item}`, but `{file}` does not exist"),
                    );
                    continue;
                };
                if let Some(why) = missing_item(&source, &item) {
                    problems.add(doc, n, format!("names `{file}::{item}`: {why} in {file}"));
                }
            }
        }
        for (n, code) in code_of(&text) {
            for after in invocations(&code) {
                if let Some(why) = cli.check(after) {
                    problems.add(doc, n, why);
                }
            }
        }
    }
    assert!(
        problems.0.is_empty(),
        "documents name what does not exist (fix the document, or the name):\n  {}",
        problems.0.join("\n  ")
    );
}

/// The layers `tests/layers.rs` enforces: module → layer.
fn enforced_layers() -> BTreeMap<String, u8> {
    let source = read("tests/layers.rs");
    let table = source
        .split("const LAYERS")
        .nth(1)
        .and_then(|rest| rest.split("];").next())
        .expect("LAYERS in tests/layers.rs");
    table
        .lines()
        .filter_map(|line| {
            let line = line.trim().strip_prefix("(\"")?;
            let (name, rest) = line.split_once('"')?;
            let layer = rest.trim_start_matches([',', ' ']).split(')').next()?;
            Some((name.to_string(), layer.trim().parse().ok()?))
        })
        .collect()
}

/// ARCHITECTURE.md's section `## {title}`, up to the next `## `.
fn section<'a>(text: &'a str, title: &str) -> &'a str {
    let start = text
        .find(&format!("\n## {title}\n"))
        .unwrap_or_else(|| panic!("the document has no section `## {title}`"));
    let rest = &text[start + 1..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |e| e + 3);
    &rest[..end]
}

#[test]
fn the_architectures_layer_table_is_the_enforced_one() {
    let text = read("ARCHITECTURE.md");
    let view = section(&text, "Bird's-eye view");
    let mut documented = BTreeMap::new();
    for line in view.lines() {
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        let Some(layer) = cells.first().and_then(|c| c.parse::<u8>().ok()) else {
            continue;
        };
        for module in cells.get(1).copied().unwrap_or_default().split(',') {
            documented.insert(module.trim().trim_matches('`').to_string(), layer);
        }
    }
    let enforced = enforced_layers();
    assert!(enforced.len() > 5, "LAYERS not read: {enforced:?}");
    assert_eq!(
        documented, enforced,
        "ARCHITECTURE.md's layer table (`## Bird's-eye view`, rows `| N | `module`, … |`) \
         disagrees with LAYERS in tests/layers.rs"
    );
}

/// The bullets of a list section, each with the line it starts on.
fn bullets(text: &str, title: &str) -> Vec<(usize, String)> {
    let offset = text
        .find(&format!("\n## {title}\n"))
        .unwrap_or_else(|| panic!("no section `## {title}`"))
        + 1;
    let first_line = text[..offset].lines().count() + 1;
    let mut found: Vec<(usize, String)> = Vec::new();
    for (n, line) in section(text, title).lines().enumerate() {
        if line.starts_with("- ") {
            found.push((first_line + n, String::new()));
        } else if line.starts_with('#') {
            continue;
        }
        if let Some((_, body)) = found.last_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    found
}

/// An invariant's bold title, as one line.
fn title_of(bullet: &str) -> String {
    let flat = bullet.split_whitespace().collect::<Vec<_>>().join(" ");
    flat.split("**").nth(1).unwrap_or("").to_string()
}

#[test]
fn every_invariant_names_its_test() {
    let index = read("docs/invariants.md");
    let bullets = bullets(&index, "Index: each invariant and the tests that hold it");
    assert!(bullets.len() > 20, "the invariants were not read");
    let unnamed: Vec<String> = bullets
        .iter()
        .filter(|(_, body)| items_in(body).is_empty())
        .map(|(n, body)| {
            format!(
                "docs/invariants.md:{n}: {}",
                body.lines().next().unwrap_or("")
            )
        })
        .collect();
    assert!(
        unnamed.is_empty(),
        "invariants that name no test (`tests/<file>.rs::<test>` or `src/<path>.rs::<test>`):\n  {}",
        unnamed.join("\n  ")
    );
    // ARCHITECTURE.md lists the same invariants, in the same order.
    let listed: Vec<String> = bullets_in_architecture()
        .iter()
        .map(|(_, b)| title_of(b))
        .collect();
    let indexed: Vec<String> = bullets.iter().map(|(_, b)| title_of(b)).collect();
    assert_eq!(
        listed, indexed,
        "ARCHITECTURE.md's invariants and docs/invariants.md's index differ"
    );
}

fn bullets_in_architecture() -> Vec<(usize, String)> {
    bullets(&read("ARCHITECTURE.md"), "Invariants")
}

#[test]
fn the_test_table_has_a_row_for_every_test_binary() {
    let table = read("tests/README.md");
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(checkout().join("tests")).expect("tests/ reads") {
        let path = entry.expect("reads").path();
        if path.extension().is_some_and(|e| e == "rs") {
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            if !table.contains(&format!("\n| `{name}` |")) {
                missing.push(name);
            }
        }
    }
    assert!(
        missing.is_empty(),
        "tests/README.md has no row for these test binaries (say what each needs): {missing:?}"
    );
}

/// Every `#[ignore]` under `tests/` says which tiers of tests/README.md
/// it is in and that `scripts/test` runs it: `tier NAME[+NAME…]: needs …;
/// scripts/test runs it`. A plain `cargo test` prints that reason.
#[test]
fn every_ignored_test_names_its_tier() {
    let readme = read("tests/README.md");
    let start = readme
        .find("\n## Tiers\n")
        .expect("tests/README.md has `## Tiers`");
    let rest = &readme[start + 1..];
    let tiers: BTreeSet<&str> = rest[..rest[3..].find("\n## ").map_or(rest.len(), |e| e + 3)]
        .lines()
        .filter_map(|l| l.strip_prefix("| `")?.split_once("` |").map(|(t, _)| t))
        .collect();
    assert!(tiers.contains("clis"), "no tier table: {tiers:?}");
    let mut wrong = Vec::new();
    for entry in walkdir::WalkDir::new(checkout().join("tests")).sort_by_file_name() {
        let entry = entry.expect("tests/ reads");
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "rs")
            || path.components().any(|c| c.as_os_str() == "node_modules")
        {
            continue;
        }
        let text = std::fs::read_to_string(path).expect("reads");
        for (n, line) in text.lines().enumerate() {
            let Some(attr) = line.trim().strip_prefix("#[ignore") else {
                continue;
            };
            let named = attr
                .strip_prefix(" = \"tier ")
                .and_then(|r| r.strip_suffix("; scripts/test runs it\"]"))
                .and_then(|r| r.split_once(": needs "))
                .is_some_and(|(names, _)| names.split('+').all(|t| tiers.contains(t)));
            if !named {
                wrong.push(format!("{}:{}: {}", path.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "an #[ignore] must read `tier NAME: needs …; scripts/test runs it`, NAME in tests/README.md's tiers {tiers:?}:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_scanners_read_what_documents_write() {
    assert_eq!(
        paths_in("see `src/run/mod.rs`, and tests/acp.rs."),
        [
            ("src/run/mod.rs".to_string(), "src/run/mod.rs".to_string()),
            ("tests/acp.rs.".to_string(), "tests/acp.rs".to_string())
        ]
    );
    assert_eq!(
        paths_in("`docs/harnesses/<cli>.md`, /tmp/lab/src/main.rs, tests/clis/node_modules/.bin"),
        [
            ("docs/harnesses/".to_string(), "docs/harnesses/".to_string()),
            (
                "tests/clis/node_modules/.bin".to_string(),
                "tests/clis".to_string()
            )
        ]
    );
    assert_eq!(
        links_in("[a](docs/x.md#y) [b](https://e.test/z)"),
        ["docs/x.md"]
    );
    assert_eq!(
        flag_values("cargo test --test docs --test readme", "--test "),
        ["docs", "readme"]
    );
    assert_eq!(
        items_in("`tests/acp.rs::run_x`, `src/run/mod.rs::Bridge::run`."),
        [
            ("tests/acp.rs".to_string(), "run_x".to_string()),
            ("src/run/mod.rs".to_string(), "Bridge::run".to_string())
        ]
    );
    let source = "struct Bridge;\nimpl Bridge {\n    pub async fn run() {}\n}\nfn runner() {}\n";
    assert_eq!(missing_item(source, "Bridge::run"), None);
    assert!(missing_item(source, "Bridge::walk").is_some());
    assert!(missing_item(source, "Other::run").is_some());
    assert_eq!(missing_item(source, "runn*"), None);
    assert!(missing_item("fn running() {}", "run").is_some());
    let code = code_of(
        "a `harness-bridge run`\nb `x\nharness-bridge serve`\n```sh\nharness-bridge relay\n```\n",
    );
    let said: Vec<&str> = code.iter().flat_map(|(_, c)| invocations(c)).collect();
    assert_eq!(said, ["relay", "run", "serve"]);
    assert_eq!(code.iter().find(|(_, c)| c.contains("serve")).unwrap().0, 2);
}

/// `serve --help` lists every route `serve` answers: an operator reads the
/// API there first. (Each `.route("…")` of `src/serve/http.rs`, its
/// parameters compared by place, not name.)
#[test]
fn serve_help_lists_every_route() {
    let help = help_of(&["serve"]);
    let shape = |path: &str| {
        let mut out = String::new();
        let mut inside = false;
        for c in path.chars() {
            match c {
                '{' => {
                    inside = true;
                    out.push_str("{}");
                }
                '}' => inside = false,
                _ if inside => {}
                // A query starts where the path ends.
                '?' => break,
                c => out.push(c),
            }
        }
        out
    };
    let listed: BTreeSet<String> = help
        .split_whitespace()
        .filter(|word| word.starts_with('/'))
        .map(shape)
        .collect();
    let routes = read("src/serve/http.rs");
    let mut missing = Vec::new();
    for piece in routes.split(".route(\"").skip(1) {
        let path = piece.split('"').next().unwrap_or_default();
        if !listed.contains(&shape(path)) {
            missing.push(path.to_string());
        }
    }
    assert!(
        missing.is_empty(),
        "serve --help does not list {missing:?}:\n{help}"
    );
}
