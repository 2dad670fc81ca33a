//! The chat commands from what a person types, and the operator's
//! command settings from a binding: any text is a command or the
//! harness's message, never a panic; a command is only ever a declared
//! word after the prefix.
#![no_main]

use harness_bridge::command::{Access, COMMANDS, parse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for prefix in ["/", "!", "", "::"] {
        let Some(invocation) = parse(text, prefix) else {
            continue;
        };
        assert!(!prefix.is_empty(), "commands are off without a prefix");
        let word = invocation.command.word();
        assert!(COMMANDS.iter().any(|d| d.word == word));
        let typed = text.trim().strip_prefix(prefix).unwrap_or_default();
        assert!(
            typed.to_ascii_lowercase().starts_with(word),
            "{word} from {text:?}"
        );
        assert!(text.contains(invocation.args));
    }
    // The operator's settings: read, or refused with a reason.
    if let Ok(access) = serde_json::from_str::<Access>(text) {
        for declared in COMMANDS {
            let _ = access.who(declared.command).describe();
        }
    }
});
