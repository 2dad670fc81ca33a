//! `bridge.yaml`: any text loads or is refused with a message; a config
//! that loads keeps the promises its checks make and round-trips.
#![no_main]

use harness_bridge::serve::ServeConfig;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let config = match ServeConfig::parse("bridge.yaml", text) {
        Ok(config) => config,
        Err(why) => {
            assert!(!why.to_string().trim().is_empty());
            return;
        }
    };
    assert!(!config.no_auth || config.listen.ip().is_loopback());
    assert!(!config.no_auth || config.api_tokens.is_empty());
    assert!(config.api_tokens.iter().all(|t| t.len() >= 16));
    assert!(config.max_concurrent_runs >= 1);
    assert!(config.max_queue_per_conversation >= 1);
    assert!(config.max_queued_total >= 1);
    // No binding key the operator wrote is one no binding reads.
    let bindings = [&config.default_config, &config.fixed_config]
        .into_iter()
        .chain(config.harness_config.values());
    for binding in bindings {
        assert!(
            binding
                .0
                .keys()
                .all(|k| harness_bridge::projection::unknown_key(k).is_none())
        );
    }
    let json = serde_json::to_value(&config).expect("a config serializes");
    let back: ServeConfig =
        serde_json::from_value(json.clone()).expect("a serialized config parses");
    assert_eq!(
        serde_json::to_value(&back).expect("a config serializes"),
        json
    );
});
