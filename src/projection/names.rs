//! Safe names: every id or path that comes from outside passes here before
//! it names anything on disk.
//!
//! IM ids can hold anything (`../`, `/`, NUL, emoji, 4 KB strings), so an id
//! becomes a *readable slug plus a hash of the whole id*: the slug keeps the
//! folder recognisable, the hash keeps two different ids apart even when
//! their slugs agree (`a/b` and `a?b`), and the same id always maps to the
//! same name.

use sha2::{Digest, Sha256};

use super::ProjectionError;

const SLUG_MAX: usize = 40;
const HASH_HEX: usize = 12;
/// Longest component a skill file path may have, in bytes.
pub const COMPONENT_MAX: usize = 255;
/// Longest relative path a skill file may have, in bytes.
pub const PATH_MAX: usize = 1024;

/// Hex SHA-256 prefix of `text`: short, stable, and collision-resistant
/// enough to tell ids apart (48 bits).
pub fn short_hash(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    hex::encode(&digest[..HASH_HEX / 2])
}

/// A path component for any id: `slug-hash`, ASCII only, never empty,
/// never `.`/`..`, at most 53 bytes.
pub fn safe_component(id: &str) -> String {
    let mut slug = String::with_capacity(SLUG_MAX);
    let mut dash = false;
    for c in id.chars() {
        if slug.len() >= SLUG_MAX {
            break;
        }
        if c.is_ascii_alphanumeric() || c == '_' {
            slug.push(c);
            dash = false;
        } else if !dash && !slug.is_empty() {
            slug.push('-');
            dash = true;
        }
    }
    let slug = slug.trim_end_matches('-');
    let hash = short_hash(id);
    if slug.is_empty() {
        format!("x-{hash}")
    } else {
        format!("{slug}-{hash}")
    }
}

const RESERVED: [&str; 22] = [
    "con", "prn", "aux", "nul", "com1", "com2", "com3", "com4", "com5", "com6", "com7", "com8",
    "com9", "lpt1", "lpt2", "lpt3", "lpt4", "lpt5", "lpt6", "lpt7", "lpt8", "lpt9",
];

fn unsafe_path(path: &str, reason: &'static str) -> ProjectionError {
    ProjectionError::UnsafePath {
        path: path.escape_debug().take(200).collect(),
        reason,
    }
}

/// Check one path component as given by an operator (a skill name or a
/// file name): it must be usable as is, not rewritten, because the harness
/// and the operator refer to it by that name.
pub fn check_component<'a>(component: &'a str, whole: &str) -> Result<&'a str, ProjectionError> {
    if component.is_empty() {
        return Err(unsafe_path(whole, "empty path component"));
    }
    if component == "." || component == ".." {
        return Err(unsafe_path(whole, "`.` and `..` are not allowed"));
    }
    if component.len() > COMPONENT_MAX {
        return Err(unsafe_path(
            whole,
            "a path component is longer than 255 bytes",
        ));
    }
    if component
        .chars()
        .any(|c| c.is_control() || matches!(c, '/' | '\\' | ':'))
    {
        return Err(unsafe_path(
            whole,
            "control characters, `/`, `\\` and `:` are not allowed in a name",
        ));
    }
    if component.ends_with('.') || component.ends_with(' ') {
        return Err(unsafe_path(
            whole,
            "a component may not end with `.` or a space",
        ));
    }
    let stem = component
        .split('.')
        .next()
        .unwrap_or(component)
        .to_ascii_lowercase();
    if RESERVED.contains(&stem.as_str()) {
        return Err(unsafe_path(
            whole,
            "reserved device name (CON, NUL, COM1, ...)",
        ));
    }
    Ok(component)
}

/// Split a relative path from outside into checked components: no absolute
/// paths, no `..`, no empty parts, bounded length.
pub fn relative_components(path: &str) -> Result<Vec<&str>, ProjectionError> {
    if path.is_empty() {
        return Err(unsafe_path(path, "empty path"));
    }
    if path.len() > PATH_MAX {
        return Err(unsafe_path(path, "path is longer than 1024 bytes"));
    }
    if path.starts_with('/') {
        return Err(unsafe_path(path, "absolute paths are not allowed"));
    }
    path.split('/').map(|c| check_component(c, path)).collect()
}

/// A skill name: what Claude Code and Codex accept as a skill folder —
/// lowercase letters, digits and hyphens, 1 to 64 characters.
pub fn check_skill_name(name: &str) -> Result<&str, ProjectionError> {
    let valid = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if valid {
        Ok(name)
    } else {
        Err(unsafe_path(
            name,
            "a skill name is 1-64 lowercase letters, digits and inner hyphens",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_are_safe_distinct_and_stable() {
        let hostile = [
            "",
            ".",
            "..",
            "../etc",
            "/",
            "a/b",
            "a?b",
            "a\0b",
            "NUL",
            "con",
            "🚀🚀",
            "用户-42",
            "group_123",
            "Group_123",
            &"x".repeat(4096),
        ];
        let mut seen = std::collections::HashSet::new();
        for id in hostile {
            let name = safe_component(id);
            assert!(seen.insert(name.clone()), "{id:?} collided as {name}");
            assert_eq!(name, safe_component(id));
            assert!(name.len() <= SLUG_MAX + 1 + HASH_HEX, "{name}");
            assert!(
                name.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
                "{name}"
            );
            assert!(check_component(&name, &name).is_ok(), "{name}");
        }
        assert!(safe_component("group_123").starts_with("group_123-"));
        assert!(check_component("a/b", "a/b").is_err());
        assert!(check_component("../../x.png", "../../x.png").is_err());
    }

    #[test]
    fn hostile_relative_paths_are_refused() {
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "a/../b",
            "a//b",
            "a/./b",
            "a\0b",
            "nul.txt",
            "a\\b",
            "c:x",
            "x.",
            "a/",
            &"y".repeat(300),
        ] {
            assert!(relative_components(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(
            relative_components("docs/ref.md").unwrap(),
            ["docs", "ref.md"]
        );
        for bad in ["", "A", "-a", "a-", "a_b", "a/b", "..", &"a".repeat(65)] {
            assert!(check_skill_name(bad).is_err(), "{bad:?} accepted");
        }
        assert!(check_skill_name("pdf-tools2").is_ok());
    }
}
