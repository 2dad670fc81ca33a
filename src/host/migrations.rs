//! Versioned schema migrations, one list per backend: a store records the
//! last version it applied and applies what follows, each in a
//! transaction, in order. A store from a newer build (a version past the
//! list) is refused rather than guessed at.

/// One step of a backend's schema.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    /// 1, 2, 3, ...: the list's position, recorded once applied.
    pub version: i64,
    /// What it does, for logs and `migrate`'s report.
    pub name: &'static str,
    /// The statements, run as one batch.
    pub sql: &'static str,
}

/// The steps of `list` a store at `applied` still needs; `Err(latest)`
/// when the store is newer than this build.
pub fn pending(list: &'static [Migration], applied: i64) -> Result<&'static [Migration], i64> {
    let latest = list.last().map_or(0, |m| m.version);
    if applied > latest {
        return Err(latest);
    }
    Ok(&list[usize::try_from(applied).unwrap_or(0).min(list.len())..])
}

#[cfg(test)]
pub(crate) fn assert_numbered(list: &[Migration]) {
    for (i, m) in list.iter().enumerate() {
        assert_eq!(
            m.version,
            i as i64 + 1,
            "migration {} is out of order",
            m.name
        );
        assert!(!m.sql.trim().is_empty(), "migration {} is empty", m.name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static LIST: [Migration; 2] = [
        Migration {
            version: 1,
            name: "a",
            sql: "x",
        },
        Migration {
            version: 2,
            name: "b",
            sql: "y",
        },
    ];

    #[test]
    fn pending_is_what_follows_the_applied_version() {
        assert_numbered(&LIST);
        assert_eq!(pending(&LIST, 0).map(<[_]>::len), Ok(2));
        assert_eq!(pending(&LIST, 1).map(|p| p[0].name), Ok("b"));
        assert_eq!(pending(&LIST, 2).map(<[_]>::len), Ok(0));
        assert_eq!(pending(&LIST, 3).map(<[_]>::len), Err(2));
    }
}
