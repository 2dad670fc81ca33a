//! An operator's egress rule and a destination a harness names: whatever
//! the text, the rules answer without a panic, a rule that cannot be read
//! allows nothing, and a deny rule always wins over the same allow rule.
#![no_main]

use harness_bridge::harness::cage::{Egress, Verdict};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (rule, host) = text.split_once('\n').unwrap_or((text, "example.org"));
    for port in [80, 443, 8443] {
        let allowed = Egress {
            allow: vec![rule.to_string()],
            deny: Vec::new(),
            ..Egress::default()
        };
        let verdict = allowed.verdict(host, port);
        if allowed.check_rules().is_err() {
            assert_eq!(verdict, Verdict::Unlisted, "{rule:?} {host:?}");
        }
        let denied = Egress {
            allow: vec![rule.to_string()],
            deny: vec![rule.to_string()],
            ..Egress::default()
        };
        if verdict == Verdict::Allowed {
            assert_eq!(
                denied.verdict(host, port),
                Verdict::Denied(rule.to_string())
            );
        }
    }
});
