//! When bytes a host returns can be shown to a model as text rather than
//! base64: answers carry text where it is text.

/// Text a model can read: UTF-8 with no control characters but whitespace.
pub fn as_text(bytes: &[u8]) -> Option<&str> {
    std::str::from_utf8(bytes).ok().filter(|text| {
        !text
            .chars()
            .any(|c| c.is_control() && !matches!(c, '\n' | '\r' | '\t'))
    })
}

/// `bytes` as text when they are text, allowing a character cut off at the
/// end when the bytes are only the first part of a file (`cut`): the text
/// then stops before it. A range of CJK text almost always ends mid-character.
pub fn text_head(bytes: &[u8], cut: bool) -> Option<&str> {
    match std::str::from_utf8(bytes) {
        Err(e) if cut && e.error_len().is_none() => as_text(&bytes[..e.valid_up_to()]),
        _ => as_text(bytes),
    }
}

/// Whether bytes of a file typed `mime` are to be shown as text.
pub fn is_text(mime: Option<&str>, bytes: &[u8]) -> bool {
    let declared_binary = mime.is_some_and(|m| {
        !(m.starts_with("text/")
            || m.contains("json")
            || m.contains("xml")
            || m.contains("yaml")
            || m.contains("javascript"))
    });
    !declared_binary && as_text(bytes).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_cut_mid_character_stops_before_it() {
        let text = "部署完成".as_bytes();
        // 7 bytes: two characters and the first byte of the third.
        assert_eq!(text_head(&text[..7], true), Some("部署"));
        assert_eq!(
            text_head(&text[..7], false),
            None,
            "a whole file must be whole"
        );
        assert_eq!(text_head(text, false), Some("部署完成"));
        assert_eq!(text_head(&[0xff, b'a'], true), None, "invalid is not cut");
        assert_eq!(text_head(b"a\x00b", true), None, "control bytes are binary");
    }
}
