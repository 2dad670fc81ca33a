//! The keys a settings struct takes, read from its one declaration (its
//! serde fields), and the known key nearest a mistyped one.
//!
//! A misspelled key that is silently ignored turns a setting off: a
//! `permision_mode` in `fixed_config` leaves the operator's lock open. So
//! every place that reads settings checks their keys against the struct
//! that reads them, and says which key was meant.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, Visitor};

/// The field names `T` reads, as serde declares them (renames applied).
pub fn fields_of<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    let mut fields: &'static [&'static str] = &[];
    // The probe always refuses: only the names it was shown are kept.
    let _ = T::deserialize(Probe(&mut fields));
    fields
}

/// The known name nearest `word` when it is near enough to be a typo of it
/// (`permision_mode` → `permission_mode`, `modle` → `model`) or the start
/// of it (`claude` → `claude-code`).
pub fn nearest<'a>(word: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let word = word.to_ascii_lowercase();
    known
        .into_iter()
        .map(|name| {
            let lower = name.to_ascii_lowercase();
            let distance = match word.len() >= 3 && lower.starts_with(&word) {
                true => 1,
                false => strsim::damerau_levenshtein(&word, &lower),
            };
            (distance, name)
        })
        .filter(|(distance, name)| *distance <= (name.len() / 3).max(1))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, name)| name)
}

/// ` (did you mean `x`?)` for `word` among `known`, or nothing.
pub fn did_you_mean<'a>(word: &str, known: impl IntoIterator<Item = &'a str>) -> String {
    nearest(word, known)
        .map(|name| format!(" (did you mean `{name}`?)"))
        .unwrap_or_default()
}

/// A deserializer that only notes the fields a struct asks for.
struct Probe<'a>(&'a mut &'static [&'static str]);

/// The probe's one answer.
#[derive(Debug)]
struct Stop;

impl fmt::Display for Stop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("probed")
    }
}

impl std::error::Error for Stop {}

impl de::Error for Stop {
    fn custom<T: fmt::Display>(_: T) -> Self {
        Stop
    }
}

impl<'de> Deserializer<'de> for Probe<'_> {
    type Error = Stop;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
        Err(Stop)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Stop> {
        *self.0 = fields;
        Err(Stop)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map enum identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize)]
    #[allow(dead_code)]
    struct Settings {
        model: String,
        #[serde(rename = "permission_mode")]
        mode: String,
    }

    #[test]
    fn the_fields_are_the_declared_ones_and_a_typo_finds_its_key() {
        let keys = fields_of::<Settings>();
        assert_eq!(keys, ["model", "permission_mode"]);
        assert_eq!(
            nearest("permision_mode", keys.iter().copied()),
            Some("permission_mode")
        );
        assert_eq!(nearest("modle", keys.iter().copied()), Some("model"));
        assert_eq!(nearest("Model", keys.iter().copied()), Some("model"));
        assert_eq!(nearest("working_directory", keys.iter().copied()), None);
        assert_eq!(did_you_mean("xyz", keys.iter().copied()), "");
    }
}
