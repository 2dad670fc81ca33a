//! Text as every backend's full-text index sees it, so a search finds the
//! same rows on SQLite and PostgreSQL: CJK characters become one word
//! each (CJK text has no spaces between words), and a query is split into
//! words the same way, each then matched as a phrase.

fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF      // Hiragana, Katakana
        | 0x3400..=0x4DBF    // CJK Extension A
        | 0x4E00..=0x9FFF    // CJK Unified Ideographs
        | 0xAC00..=0xD7AF    // Hangul syllables
        | 0xF900..=0xFAFF    // CJK Compatibility Ideographs
        | 0x20000..=0x2FA1F) // CJK Extensions B–F, supplement
}

/// Text as the full-text index stores it: CJK characters spaced out, so a
/// phrase of them matches wherever they appear in a row.
pub fn index_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 2);
    for c in text.chars() {
        if is_cjk(c) {
            out.push(' ');
            out.push(c);
            out.push(' ');
        } else {
            out.push(c);
        }
    }
    out
}

/// A person's search words, each as index text (a phrase to match).
/// Control characters split words too (SQLite's FTS5 reads a query only up
/// to a NUL); a word with no letter or digit holds nothing an index could
/// match and is dropped.
pub fn search_words(query: &str) -> Vec<String> {
    query
        .split(|c: char| c.is_whitespace() || c.is_control())
        .filter(|word| word.chars().any(char::is_alphanumeric))
        .map(|word| index_text(word).trim().to_string())
        .collect()
}

/// The search order every backend keeps: items holding every word
/// (`every`, newest first), then items holding some (`some`, newest first)
/// that are not already there, `top_k` in all. Recency, not word rarity:
/// for chat history the more useful order, and one a backend computes
/// inside one conversation without statistics over the whole store.
pub fn every_then_some(
    mut every: Vec<crate::protocol::TranscriptItem>,
    some: Vec<crate::protocol::TranscriptItem>,
    top_k: usize,
) -> Vec<crate::protocol::TranscriptItem> {
    every.truncate(top_k);
    let seen: std::collections::HashSet<String> =
        every.iter().map(|i| i.transcript_id.clone()).collect();
    let room = top_k - every.len();
    every.extend(
        some.into_iter()
            .filter(|i| !seen.contains(&i.transcript_id))
            .take(room),
    );
    every
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cjk_is_spaced_and_words_split_on_controls() {
        assert_eq!(index_text("部署失败 ok"), " 部  署  失  败  ok");
        assert_eq!(search_words("deploy 部署 -- ..."), ["deploy", "部  署"]);
        assert!(search_words("   ").is_empty());
        assert_eq!(search_words("foo\u{0}bar\u{7}"), ["foo", "bar"]);
    }
}
