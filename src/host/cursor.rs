//! Opaque, tamper-proof page cursors.
//!
//! A cursor names a position (a sequence number) in one conversation's
//! transcript or event log. It is signed with the store's secret, so a
//! runner can neither forge a position nor replay a cursor from another
//! conversation: both fail verification with `invalid_argument`.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::protocol::AgentAPIError;

type HmacSha256 = Hmac<Sha256>;
const MAC_LEN: usize = 16;
const BODY_LEN: usize = 1 + 8 + 8;

/// Which log a cursor points into; a history cursor is no event cursor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CursorKind {
    /// A position in a transcript.
    History,
    /// A position in an event log.
    Events,
}

impl CursorKind {
    fn tag(self) -> u8 {
        match self {
            CursorKind::History => b'h',
            CursorKind::Events => b'e',
        }
    }
}

/// A decoded cursor: a position in one stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    /// Which log.
    pub kind: CursorKind,
    /// The conversation stream (conversation + thread) it belongs to.
    pub stream: i64,
    /// The item's number within the stream.
    pub seq: i64,
}

/// Signs and verifies cursors with one secret key.
#[derive(Clone)]
pub struct CursorCodec {
    key: Vec<u8>,
}

impl std::fmt::Debug for CursorCodec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CursorCodec(..)")
    }
}

impl CursorCodec {
    /// A codec keyed by the store's secret.
    pub fn new(key: &[u8]) -> Self {
        CursorCodec { key: key.to_vec() }
    }

    fn mac(&self, body: &[u8]) -> HmacSha256 {
        // HMAC accepts keys of any length, so this cannot fail.
        #[allow(clippy::expect_used, reason = "HMAC takes a key of any length")]
        let mut mac = HmacSha256::new_from_slice(&self.key).expect("HMAC takes any key length");
        mac.update(body);
        mac
    }

    /// The opaque token for a position.
    pub fn encode(&self, cursor: Cursor) -> String {
        let mut buf = Vec::with_capacity(BODY_LEN + MAC_LEN);
        buf.push(cursor.kind.tag());
        buf.extend_from_slice(&cursor.stream.to_be_bytes());
        buf.extend_from_slice(&cursor.seq.to_be_bytes());
        let tag = self.mac(&buf).finalize().into_bytes();
        buf.extend_from_slice(&tag[..MAC_LEN]);
        URL_SAFE_NO_PAD.encode(buf)
    }

    /// Verify a token and check it belongs to `kind` in `stream`.
    pub fn decode(
        &self,
        token: &str,
        kind: CursorKind,
        stream: i64,
    ) -> Result<Cursor, AgentAPIError> {
        let invalid = || {
            AgentAPIError::invalid_argument(
                "cursor is not valid for this conversation; pass back a cursor this API returned",
            )
        };
        let bytes = URL_SAFE_NO_PAD
            .decode(token.as_bytes())
            .map_err(|_| invalid())?;
        if bytes.len() != BODY_LEN + MAC_LEN {
            return Err(invalid());
        }
        let (body, tag) = bytes.split_at(BODY_LEN);
        self.mac(body)
            .verify_truncated_left(tag)
            .map_err(|_| invalid())?;
        let read = |range: std::ops::Range<usize>| {
            let mut raw = [0u8; 8];
            raw.copy_from_slice(&body[range]);
            i64::from_be_bytes(raw)
        };
        let cursor = Cursor {
            kind: if body[0] == b'h' {
                CursorKind::History
            } else {
                CursorKind::Events
            },
            stream: read(1..9),
            seq: read(9..17),
        };
        if cursor.kind != kind || cursor.stream != stream {
            return Err(invalid());
        }
        Ok(cursor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_tamper() {
        let codec = CursorCodec::new(b"secret");
        let c = Cursor {
            kind: CursorKind::History,
            stream: 7,
            seq: 42,
        };
        let token = codec.encode(c);
        assert_eq!(codec.decode(&token, CursorKind::History, 7).unwrap(), c);
        // Another stream, another kind, another key, a flipped byte: all refused.
        assert!(codec.decode(&token, CursorKind::History, 8).is_err());
        assert!(codec.decode(&token, CursorKind::Events, 7).is_err());
        assert!(
            CursorCodec::new(b"other")
                .decode(&token, CursorKind::History, 7)
                .is_err()
        );
        let mut raw = URL_SAFE_NO_PAD.decode(&token).unwrap();
        raw[16] ^= 1;
        assert!(
            codec
                .decode(&URL_SAFE_NO_PAD.encode(raw), CursorKind::History, 7)
                .is_err()
        );
        assert!(codec.decode("42", CursorKind::History, 7).is_err());
    }
}
