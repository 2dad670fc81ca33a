//! The crate's layers, kept: data flows one way (protocol → host →
//! projection → harness → run → relay / serve → cli), so a module may name
//! only modules of a lower layer than its own. This test reads every source
//! file and fails on an import up (or across) the layers, naming the file,
//! the line and the two modules.

use std::path::Path;

/// Each top-level module's layer; a module may use only lower ones.
const LAYERS: &[(&str, u8)] = &[
    // What every layer may use: wire types and process-wide plumbing.
    ("protocol", 0),
    ("throttle", 0),
    ("metrics", 0),
    ("settings_keys", 0),
    ("owner", 0),
    ("disk", 0),
    ("interaction", 1),
    ("http_server", 1),
    ("command", 1),
    ("host", 2),
    ("projection", 3),
    ("repo", 3),
    ("harness", 4),
    ("mcp", 5),
    ("door", 5),
    ("run", 6),
    ("relay", 7),
    ("serve", 7),
    ("cli", 8),
];

fn layer(module: &str) -> Option<u8> {
    LAYERS.iter().find(|(m, _)| *m == module).map(|(_, l)| *l)
}

/// The top-level modules a line names as `crate::a…` or `crate::{a, b…}`.
fn named(line: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        found.extend(leading_names(rest));
    }
    found
}

/// The code of `text` as statements a reader sees whole: each line with
/// its `//` comment cut, and a `use` that runs over several lines joined
/// into one (`use super::{\n a,\n b::c,\n};`), each with the number of
/// the line it starts on.
fn statements(text: &str) -> Vec<(usize, String)> {
    let mut found: Vec<(usize, String)> = Vec::new();
    let mut open: Option<(usize, String)> = None;
    for (n, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        if let Some((start, joined)) = open.as_mut() {
            joined.push(' ');
            joined.push_str(code.trim());
            if code.contains(';') {
                found.push((*start, std::mem::take(joined)));
                open = None;
            }
            continue;
        }
        let trimmed = code.trim_start();
        let is_use =
            trimmed.starts_with("use ") || trimmed.starts_with("pub ") && trimmed.contains(" use ");
        if is_use && !code.contains(';') {
            open = Some((n + 1, code.trim().to_string()));
        } else {
            found.push((n + 1, code.to_string()));
        }
    }
    found.extend(open);
    found
}

#[test]
fn no_module_uses_one_above_or_beside_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut wrong = Vec::new();
    let mut files = 0;
    for entry in walkdir::WalkDir::new(&src) {
        let entry = entry.expect("the source tree reads");
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let relative = path.strip_prefix(&src).expect("under src");
        let top = relative
            .components()
            .next()
            .and_then(|c| c.as_os_str().to_str())
            .map(|name| name.trim_end_matches(".rs").to_string())
            .unwrap_or_default();
        // The crate root and the binary wire the layers together.
        if top == "lib" || top == "main" {
            continue;
        }
        let own = layer(&top).unwrap_or_else(|| {
            panic!("src/{top} has no layer: add it to LAYERS in tests/layers.rs")
        });
        files += 1;
        let text = std::fs::read_to_string(path).expect("a source file reads");
        for (n, code) in statements(&text) {
            for module in named(&code) {
                if module == top {
                    continue;
                }
                let Some(theirs) = layer(&module) else {
                    continue;
                };
                if theirs >= own {
                    wrong.push(format!(
                        "src/{}:{n}: `{top}` (layer {own}) uses `{module}` (layer {theirs})",
                        relative.display(),
                    ));
                }
            }
        }
    }
    assert!(files > 50, "the source tree was not found ({files} files)");
    assert!(
        wrong.is_empty(),
        "imports against the layers:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn imports_are_read_whole_and_grouped() {
    assert_eq!(named("use crate::host::GrantedHost;"), ["host"]);
    assert_eq!(
        named("use crate::{protocol::Message, run::Bridge};"),
        ["protocol", "run"]
    );
    assert_eq!(
        named("let x = crate::metrics::global(); crate::serve::INTERRUPTED"),
        ["metrics", "serve"]
    );
    assert!(named("let crate_name = 1;").is_empty());
    // A group over several lines, with groups inside, is read whole.
    let text = "use super::{\n    drive::Driven, // the end\n    prepare::{A, B},\n    settle,\n};\nfn f() {}";
    let read = statements(text);
    assert_eq!(read[0].0, 1);
    assert_eq!(
        leading_names(read[0].1.trim_start_matches("use super::")),
        ["drive", "prepare", "settle"]
    );
    assert_eq!(read[1], (6, "fn f() {}".to_string()));
    assert_eq!(
        named(
            "pub use crate::{\n host::{A,\n B}, run::X};"
                .replace('\n', " ")
                .as_str()
        ),
        ["host", "run"]
    );
}

/// The child modules of `src/<top>/`: its `.rs` files and folders.
fn children(src: &Path, top: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(src.join(top)) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_str()?.to_string();
            let name = name
                .strip_suffix(".rs")
                .map_or(name.clone(), str::to_string);
            (name != "mod" && !name.contains('.')).then_some(name)
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Which child of `src/<top>/` each name `src/<top>/mod.rs` re-exports
/// comes from (`pub use child::{A, B};`), so `crate::top::A` counts as a
/// use of that child.
fn reexports(src: &Path, top: &str, children: &[String]) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(src.join(top).join("mod.rs")).unwrap_or_default();
    let mut found = Vec::new();
    for statement in text.split(';') {
        let statement = statement.trim();
        let Some(rest) = statement.strip_prefix("pub use ") else {
            continue;
        };
        let Some((child, items)) = rest.split_once("::") else {
            continue;
        };
        if !children.iter().any(|c| c == child) {
            continue;
        }
        let items = items.trim_start_matches('{').trim_end_matches('}');
        for item in items.split(',') {
            let item = item.trim();
            let name = item.rsplit(" as ").next().unwrap_or(item).trim();
            if !name.is_empty() && name != "self" {
                found.push((name.to_string(), child.to_string()));
            }
        }
    }
    found
}

/// The uses between the children of `src/<top>/` (each child's own files,
/// tests left out): `crate::top::child…`, `super::child…` in a child's
/// first file, and a name `top/mod.rs` re-exports from a child.
fn sibling_uses(src: &Path, top: &str) -> Vec<(String, String)> {
    let kids = children(src, top);
    let exported = reexports(src, top, &kids);
    let mut edges = Vec::new();
    for entry in walkdir::WalkDir::new(src.join(top)) {
        let entry = entry.expect("the source tree reads");
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let relative = path.strip_prefix(src.join(top)).expect("under its module");
        let mut parts = relative
            .components()
            .map(|c| c.as_os_str().to_string_lossy());
        let first = parts
            .next()
            .unwrap_or_default()
            .trim_end_matches(".rs")
            .to_string();
        if first == "mod" {
            continue;
        }
        // `super::x` names a sibling only in the child's own first file.
        let direct = relative.components().count() == 1
            || relative.file_name().is_some_and(|f| f == "mod.rs")
                && relative.components().count() == 2;
        let text = std::fs::read_to_string(path).expect("a source file reads");
        let body = text.split("#[cfg(test)]").next().unwrap_or("");
        let prefix = format!("crate::{top}::");
        for (_, code) in statements(body) {
            let mut names = Vec::new();
            for (at, _) in code.match_indices(&prefix) {
                names.extend(leading_names(&code[at + prefix.len()..]));
            }
            if direct {
                for (at, _) in code.match_indices("super::") {
                    names.extend(leading_names(&code[at + "super::".len()..]));
                }
            }
            for name in names {
                let target = if kids.contains(&name) {
                    Some(name)
                } else {
                    exported
                        .iter()
                        .find(|(item, _)| *item == name)
                        .map(|(_, child)| child.clone())
                };
                if let Some(target) = target.filter(|t| *t != first) {
                    edges.push((first.clone(), target));
                }
            }
        }
    }
    edges.sort();
    edges.dedup();
    edges
}

/// The first name (or each name of a `{…}` group, groups within it
/// read to their end) at the start of `rest`.
fn leading_names(rest: &str) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.trim()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let Some(group) = rest.strip_prefix('{') else {
        return vec![ident(rest)]
            .into_iter()
            .filter(|n| !n.is_empty())
            .collect();
    };
    let mut names = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (at, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                names.push(ident(&group[start..at]));
                break;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                names.push(ident(&group[start..at]));
                start = at + 1;
            }
            _ => {}
        }
    }
    names.retain(|n| !n.is_empty());
    names
}

/// A cycle in `edges`, as the path that closes it.
fn cycle(edges: &[(String, String)]) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        edges: &[(String, String)],
        path: &mut Vec<String>,
        done: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut found = path[at..].to_vec();
            found.push(node.to_string());
            return Some(found);
        }
        if done.iter().any(|n| n == node) {
            return None;
        }
        path.push(node.to_string());
        for (_, to) in edges.iter().filter(|(from, _)| from == node) {
            if let Some(found) = visit(to, edges, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.push(node.to_string());
        None
    }
    let mut done = Vec::new();
    edges
        .iter()
        .find_map(|(from, _)| visit(from, edges, &mut Vec::new(), &mut done))
}

#[test]
fn no_import_cycle_among_any_modules_children() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut cycles = Vec::new();
    let mut modules = 0;
    for (top, _) in LAYERS {
        if !src.join(top).is_dir() {
            continue;
        }
        modules += 1;
        if let Some(found) = cycle(&sibling_uses(&src, top)) {
            cycles.push(format!("src/{top}/: {}", found.join(" → ")));
        }
    }
    assert!(
        modules >= 6,
        "the source tree was not found ({modules} modules)"
    );
    assert!(
        cycles.is_empty(),
        "import cycles between sub-modules:\n{}",
        cycles.join("\n")
    );
}

#[test]
fn a_cycle_is_found_and_a_chain_is_not() {
    let edge = |a: &str, b: &str| (a.to_string(), b.to_string());
    assert_eq!(
        cycle(&[
            edge("adapter", "live"),
            edge("live", "acp"),
            edge("acp", "adapter")
        ]),
        Some(vec![
            "adapter".into(),
            "live".into(),
            "acp".into(),
            "adapter".into()
        ])
    );
    assert_eq!(
        cycle(&[edge("a", "b"), edge("b", "c"), edge("a", "c")]),
        None
    );
    assert_eq!(leading_names("{adapter::X, live}"), ["adapter", "live"]);
}
