//! The JSON-RPC 2.0 both of the bridge's JSON-RPC harnesses speak over
//! stdio, one object a line (Codex's app-server, every ACP agent): our
//! requests numbered and remembered by what they asked, each incoming line
//! sorted into a request of the peer's, an answer to one of ours, or a
//! notification, and the three shapes of what we write. A driver keeps
//! only what its protocol means.

use std::collections::HashMap;

use serde_json::{Value, json};

/// Our side of one JSON-RPC connection: the requests still unanswered,
/// each with what it was (`K`), to read its answer by.
#[derive(Debug)]
pub(crate) struct Rpc<K> {
    next_id: u64,
    sent: HashMap<u64, K>,
}

impl<K> Default for Rpc<K> {
    fn default() -> Self {
        Rpc {
            next_id: 0,
            sent: HashMap::new(),
        }
    }
}

/// One line from the peer.
pub(crate) enum Incoming<'a, K> {
    /// It asks something of us and waits for the answer to `id`.
    Request {
        id: &'a Value,
        method: &'a str,
        params: &'a Value,
    },
    /// It answers our request that was `kind` (`result` or `error` in
    /// `message`).
    Response { kind: K, message: &'a Value },
    /// It tells us something.
    Notification { method: &'a str, params: &'a Value },
    /// An answer to nothing we asked, or not JSON-RPC: ignored.
    Stray,
}

impl<K> Rpc<K> {
    /// A request of ours, remembered as `kind` until it is answered.
    pub(crate) fn request(&mut self, kind: K, method: &str, params: Value) -> String {
        self.next_id += 1;
        self.sent.insert(self.next_id, kind);
        json!({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
            .to_string()
    }

    /// Sort one parsed line; an answer is matched to our request once.
    pub(crate) fn read<'a>(&mut self, message: &'a Value) -> Incoming<'a, K> {
        match (&message["id"], message["method"].as_str()) {
            (id @ (Value::Number(_) | Value::String(_)), Some(method)) => Incoming::Request {
                id,
                method,
                params: &message["params"],
            },
            // An answer has no method at all: one whose method is not a
            // name (`"method": {...}`) is no answer to anything.
            (Value::Number(id), None) if message["method"].is_null() => {
                match id.as_u64().and_then(|id| self.sent.remove(&id)) {
                    Some(kind) => Incoming::Response { kind, message },
                    None => Incoming::Stray,
                }
            }
            (_, Some(method)) => Incoming::Notification {
                method,
                params: &message["params"],
            },
            _ => Incoming::Stray,
        }
    }
}

/// A notification of ours (no answer expected).
pub(crate) fn notification(method: &str, params: Option<Value>) -> String {
    match params {
        Some(params) => json!({"jsonrpc": "2.0", "method": method, "params": params}),
        None => json!({"jsonrpc": "2.0", "method": method}),
    }
    .to_string()
}

/// Our answer to the peer's request `id`.
pub(crate) fn result(id: &Value, result: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string()
}

/// Our refusal of the peer's request `id`.
pub(crate) fn error(id: &Value, code: i64, message: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_sorted_and_an_answer_is_matched_once() {
        let mut rpc = Rpc::default();
        let sent: Value = serde_json::from_str(&rpc.request("a", "x/y", json!({}))).unwrap();
        assert_eq!(
            (sent["id"].as_u64(), sent["jsonrpc"].as_str()),
            (Some(1), Some("2.0"))
        );
        let answer = json!({"id": 1, "result": {}});
        assert!(matches!(
            rpc.read(&answer),
            Incoming::Response { kind: "a", .. }
        ));
        assert!(matches!(rpc.read(&answer), Incoming::Stray));
        // Found by the live_acp fuzz target: an id and a method that is no
        // name answer nothing (the request it would match stays open).
        rpc.request("b", "m", json!({}));
        let odd = json!({"id": 2, "method": {"stopReason": "end_turn"}});
        assert!(matches!(rpc.read(&odd), Incoming::Stray));
        assert!(matches!(
            rpc.read(&json!({"id": 2, "result": {}})),
            Incoming::Response { kind: "b", .. }
        ));
        let ask = json!({"id": "p", "method": "m", "params": {"k": 1}});
        assert!(matches!(
            rpc.read(&ask),
            Incoming::Request { method: "m", .. }
        ));
        let tell = json!({"method": "n"});
        assert!(matches!(
            rpc.read(&tell),
            Incoming::Notification { method: "n", .. }
        ));
        assert!(matches!(rpc.read(&json!([1])), Incoming::Stray));
        let refusal: Value = serde_json::from_str(&error(&json!(7), -32601, "no")).unwrap();
        assert_eq!(refusal["error"]["code"], -32601);
        assert_eq!(refusal["id"], 7);
    }
}
