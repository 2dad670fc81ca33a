//! The LangBot plugin's runner manifests (`components/runner/*.yaml`, what
//! LangBot reads) and `harness-bridge manifest` (the bridge's own catalog)
//! declare the same runners with the same capabilities and permissions:
//! LangBot grants `event_reply`, the tool a runner sends its reply with in
//! an Agent binding, only to a runner declaring tool calling and
//! `permissions.tools: [call]`, and a catalog that says otherwise would
//! describe a runner LangBot does not run.

use harness_bridge_testkit as common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use harness_bridge::protocol::{AgentRunnerCapabilities, AgentRunnerPermissions, ToolOperation};

/// The spec part of a plugin runner manifest that must agree.
#[derive(serde::Deserialize)]
struct Component {
    metadata: Metadata,
    spec: Spec,
}

#[derive(serde::Deserialize)]
struct Metadata {
    name: String,
}

#[derive(serde::Deserialize)]
struct Spec {
    usages: Vec<String>,
    capabilities: AgentRunnerCapabilities,
    permissions: AgentRunnerPermissions,
}

fn plugin_runners() -> BTreeMap<String, Spec> {
    runners_in(&PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("integrations/langbot-plugin"))
}

/// The runner manifests of the plugin at `plugin`, by name.
fn runners_in(plugin: &std::path::Path) -> BTreeMap<String, Spec> {
    let dir = plugin.join("components/runner");
    let mut runners = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let component: Component =
            serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        runners.insert(component.metadata.name, component.spec);
    }
    runners
}

#[test]
fn the_plugin_manifests_and_the_bridge_catalog_agree() {
    assert_agree(
        &plugin_runners(),
        harness_bridge::harness::Adapters::builtin(),
    );
}

/// An operator's specs (here the README's examples) get runners of their
/// own in the plugin (`scripts/langbot-runners`, which the package build
/// runs with `--adapters DIR`), agreeing with the catalog in force, and
/// the specs go where the plugin hands them to its bridge.
#[test]
#[ignore = "tier sdk: needs the langbot-plugin SDK venv (target/sdk-venv or HARNESS_BRIDGE_SDK_PYTHON); scripts/test runs it"]
fn an_operators_specs_become_runners_of_the_plugin() {
    let work = common::tempdir();
    let plugin = work.path().join("plugin");
    let runners = plugin.join("components/runner");
    std::fs::create_dir_all(&runners).unwrap();
    let source = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("integrations/langbot-plugin");
    for entry in std::fs::read_dir(source.join("components/runner")).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            std::fs::copy(&path, runners.join(path.file_name().unwrap())).unwrap();
        }
    }
    let examples = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/adapters");
    let python = common::sdk_python();
    let generate = || common::langbot_runners(&examples, &plugin);
    let out = generate();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        said.contains("runners added: claude-acp, codex-acp"),
        "{said}"
    );
    let adapters = harness_bridge::harness::Adapters::load(&examples).unwrap();
    assert_agree(&runners_in(&plugin), &adapters);
    assert!(plugin.join("adapters/codex-acp.yaml").is_file());
    // The runner class loads where LangBot loads it, naming its harness.
    let check = std::process::Command::new(&python)
        .current_dir(&plugin)
        .args([
            "-c",
            "from components.runner.codex_acp import CodexAcp; print(CodexAcp.harness, CodexAcp.label)",
        ])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&check.stdout).trim(),
        "codex-acp Codex (ACP)",
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    // Run again: nothing is added twice.
    assert!(String::from_utf8_lossy(&generate().stdout).contains("runners added: none"));
}

/// The plugin's runners and the catalog of `adapters` offer the same
/// runners with the same capabilities and permissions.
fn assert_agree(plugin: &BTreeMap<String, Spec>, adapters: &harness_bridge::harness::Adapters) {
    let catalog = harness_bridge::harness::discovery(adapters).runners;
    let mut names: Vec<&String> = catalog.iter().map(|r| &r.runner_name).collect();
    names.sort();
    assert_eq!(
        plugin.keys().collect::<Vec<_>>(),
        names,
        "the plugin and the catalog offer different runners"
    );
    for runner in &catalog {
        let name = &runner.runner_name;
        let spec = &plugin[name.as_str()];
        let manifest = &runner.manifest;
        assert_eq!(spec.usages, manifest.usages, "{name}: usages");
        assert_eq!(
            spec.capabilities, manifest.capabilities,
            "{name}: capabilities"
        );
        // The released SDK (what LangBot reads) has no artifact or file
        // permission: those are the protocol document's, for the bridge's
        // own host, and the only keys the plugin leaves out.
        let mut wanted = manifest.permissions.clone();
        wanted.artifacts.clear();
        wanted.files.clear();
        assert_eq!(spec.permissions, wanted, "{name}: permissions");
    }
}

/// What delivery in an Agent binding needs, said once more in plain terms:
/// a manifest without it gets "Tool 'event_reply' is not authorized".
#[test]
fn every_runner_may_send_its_reply() {
    for (name, spec) in plugin_runners() {
        assert!(spec.capabilities.tool_calling, "{name}: tool_calling");
        assert!(
            spec.permissions.tools.contains(&ToolOperation::Call),
            "{name}: permissions.tools lacks call"
        );
    }
}

/// `scripts/langbot-runners` in `mode` (`--check`, `--builtin`) on the
/// plugin at `plugin`, against this build's catalog.
fn generator(mode: &str, plugin: &Path) -> (bool, String) {
    let out = std::process::Command::new(common::sdk_python())
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/langbot-runners"))
        .arg(mode)
        .arg(env!("CARGO_BIN_EXE_harness-bridge"))
        .arg(plugin)
        .output()
        .expect("the runner generator runs");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

fn source_plugin() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("integrations/langbot-plugin")
}

/// The built-in runners' files (and the plugin manifest's list of
/// harnesses) are what the generator writes from the catalog: a change to
/// a spec, or a hand edit of a runner file, fails here until
/// `scripts/langbot-runners --builtin` is run.
#[test]
fn the_plugins_runner_files_are_generated_from_the_catalog() {
    let (ok, said) = generator("--check", &source_plugin());
    assert!(
        ok,
        "the committed runner files differ from the catalog's:\n{said}"
    );
}

/// The check fails on a hand-edited runner file and on one the catalog
/// does not offer, naming each; `--builtin` writes them back.
#[test]
fn the_check_names_a_runner_file_that_differs() {
    let work = common::tempdir();
    let plugin = work.path();
    let runners = plugin.join("components/runner");
    std::fs::create_dir_all(&runners).unwrap();
    let source = source_plugin();
    std::fs::copy(source.join("manifest.yaml"), plugin.join("manifest.yaml")).unwrap();
    for entry in std::fs::read_dir(source.join("components/runner")).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            std::fs::copy(&path, runners.join(path.file_name().unwrap())).unwrap();
        }
    }
    let gemini = runners.join("gemini.yaml");
    let text = std::fs::read_to_string(&gemini).unwrap();
    assert!(text.contains("Google's Gemini CLI"), "{text}");
    std::fs::write(
        &gemini,
        text.replace("Google's Gemini CLI", "GitHub's Gemini CLI"),
    )
    .unwrap();
    std::fs::write(runners.join("retired.yaml"), "metadata: {name: retired}\n").unwrap();

    let (ok, said) = generator("--check", plugin);
    assert!(!ok, "{said}");
    assert!(said.contains("gemini.yaml: differs"), "{said}");
    assert!(
        said.contains("retired.yaml: a runner the catalog does not offer"),
        "{said}"
    );
    assert!(!said.contains("codex.yaml"), "{said}");

    let (ok, said) = generator("--builtin", plugin);
    assert!(ok, "{said}");
    assert_eq!(std::fs::read_to_string(&gemini).unwrap(), text);
    assert!(!runners.join("retired.yaml").exists());
    let (ok, said) = generator("--check", plugin);
    assert!(ok, "{said}");
}

/// What the generator's table says of each built-in harness agrees with
/// its spec: the program its path field names, and the settings its form
/// offers (a model, Claude Code's permission modes, approvals in the chat)
/// are the ones the harness takes.
#[test]
fn each_runner_form_offers_what_its_harness_takes() {
    let dir = source_plugin().join("components/runner");
    let mut forms = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let doc: serde_yaml::Value =
            serde_yaml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let name = doc["metadata"]["name"].as_str().unwrap().to_string();
        forms.insert(name, doc["spec"]["config"].clone());
    }
    for spec in harness_bridge::harness::Adapters::builtin().all() {
        let name = &spec.name;
        let config = forms
            .get(name)
            .unwrap_or_else(|| panic!("{name}: no runner"));
        let field = |key: &str| {
            config
                .as_sequence()
                .unwrap()
                .iter()
                .find(|f| f["name"].as_str() == Some(key))
        };
        let path_label = field("harness_path").expect("a harness path")["label"]["en_US"]
            .as_str()
            .unwrap()
            .to_string();
        assert_eq!(
            path_label,
            format!("{} binary (absolute path)", spec.binary),
            "{name}: harness path"
        );
        assert_eq!(
            field("model").is_some(),
            spec.takes("model"),
            "{name}: model"
        );
        assert_eq!(
            field("permission_mode").is_some(),
            spec.takes("permission_mode"),
            "{name}: permission_mode"
        );
        let asks_live = spec.asks_live();
        assert_eq!(
            field("approvals").is_some(),
            spec.takes("permission_prompt_tool") || asks_live,
            "{name}: approvals"
        );
    }
}
