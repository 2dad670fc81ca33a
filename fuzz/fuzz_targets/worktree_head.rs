//! A worktree record's HEAD, which a harness may write anything into:
//! the bridge takes only a commit id or a plain ref's full name from it,
//! written as git writes them, and never a path out of the repository.
#![no_main]

use harness_bridge::repo::head_named;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Some(named) = head_named(text) else {
        return;
    };
    let line = text.strip_suffix('\n').unwrap_or(text);
    let id = matches!(named.len(), 40 | 64)
        && named
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if id {
        assert_eq!(line, named, "{text:?}");
    } else {
        assert_eq!(line, format!("ref: {named}"), "{text:?}");
        assert!(
            named.starts_with("refs/") && !named.contains(".."),
            "{named:?}"
        );
        assert!(
            named.bytes().all(|b| b.is_ascii_graphic() && b != b'\\'),
            "{named:?}"
        );
    }
});
