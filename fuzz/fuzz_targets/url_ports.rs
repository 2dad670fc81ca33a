//! The ports the cage opens from what a harness is configured with (its
//! environment, its carried settings): any text gives ports, never a panic,
//! and every port is one the text names or a scheme's default.
#![no_main]

use harness_bridge::harness::cage::url_ports;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let ports = url_ports([text]);
    for port in &ports {
        assert!(
            *port == 80 || *port == 443 || text.contains(&port.to_string()),
            "port {port} is not in {text:?}"
        );
    }
    // No URL, no port.
    if !text.contains("http://") && !text.contains("https://") {
        assert!(ports.is_empty(), "{ports:?} from {text:?}");
    }
});
