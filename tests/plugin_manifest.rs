//! The LangBot plugin's runner manifests (`components/runner/*.yaml`, what
//! LangBot reads) and `harness-bridge manifest` (the bridge's own catalog)
//! declare the same runners with the same capabilities and permissions:
//! LangBot grants `event_reply`, the tool a runner sends its reply with in
//! an Agent binding, only to a runner declaring tool calling and
//! `permissions.tools: [call]`, and a catalog that says otherwise would
//! describe a runner LangBot does not run.

use std::collections::BTreeMap;
use std::path::PathBuf;

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
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("integrations/langbot-plugin/components/runner");
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
    let plugin = plugin_runners();
    let catalog =
        harness_bridge::harness::discovery(harness_bridge::harness::Adapters::builtin()).runners;
    let names: Vec<&String> = catalog.iter().map(|r| &r.runner_name).collect();
    assert_eq!(
        plugin.keys().collect::<Vec<_>>(),
        names,
        "the plugin and the catalog offer different runners"
    );
    for runner in &catalog {
        let name = &runner.runner_name;
        let spec = &plugin[name];
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
