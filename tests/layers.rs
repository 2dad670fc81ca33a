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
    ("interaction", 1),
    ("listen", 1),
    ("host", 2),
    ("projection", 3),
    ("harness", 4),
    ("mcp", 5),
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
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for part in group[..end].split(',') {
                let name: String = part
                    .trim()
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    found.push(name);
                }
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                found.push(name);
            }
        }
    }
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
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for module in named(code) {
                if module == top {
                    continue;
                }
                let Some(theirs) = layer(&module) else {
                    continue;
                };
                if theirs >= own {
                    wrong.push(format!(
                        "src/{}:{}: `{top}` (layer {own}) uses `{module}` (layer {theirs})",
                        relative.display(),
                        n + 1
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
}
