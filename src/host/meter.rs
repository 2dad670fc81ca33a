//! What a run's model calls used, counted where they pass: the bridge's
//! model gateway, for every harness whether or not it reports usage.
//!
//! Each run's grant holds one [`Meter`]; the gateway adds each call's
//! tokens as the call ends, the turn reads them while it runs (a budget
//! with `mid_turn: stop` is checked against them) and at its end (they
//! are the turn's usage). Once a budget stops the turn, the meter says
//! why and the gateway refuses the next call with those words.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::json;
use tokio::sync::Notify;

use crate::protocol::TokenUsage;

/// One call's tokens, as its answer said them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallUsage {
    /// The model that answered, when the answer named it.
    pub model: Option<String>,
    /// Tokens read (the prompt).
    pub input: u64,
    /// Tokens written (the answer).
    pub output: u64,
    /// Prompt tokens read from the provider's cache.
    pub cache_read: u64,
    /// Prompt tokens written to the provider's cache.
    pub cache_write: u64,
}

impl CallUsage {
    /// Whether the answer said anything at all.
    pub fn is_empty(&self) -> bool {
        self.input == 0 && self.output == 0 && self.cache_read == 0 && self.cache_write == 0
    }
}

/// A run's model calls so far.
#[derive(Debug, Default)]
pub struct Meter {
    counted: Mutex<Counted>,
    changed: Notify,
    refusal: Mutex<Option<String>>,
    /// Calls begun and not yet recorded.
    open: AtomicUsize,
}

#[derive(Debug, Default)]
struct Counted {
    calls: u64,
    input: u64,
    output: u64,
    cache_read: u64,
    cache_write: u64,
    models: BTreeSet<String>,
}

impl Meter {
    /// A call has begun: [`Meter::record`] ends it.
    pub fn begin(&self) {
        self.open.fetch_add(1, Ordering::SeqCst);
    }

    /// Add one ended call (one that said no tokens still counts a call).
    pub fn record(&self, call: &CallUsage) {
        // Saturating: a call recorded without a begin takes nothing away.
        let _ = self
            .open
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        {
            let mut counted = self.counted.lock().unwrap_or_else(|p| p.into_inner());
            counted.calls += 1;
            counted.input = counted.input.saturating_add(call.input);
            counted.output = counted.output.saturating_add(call.output);
            counted.cache_read = counted.cache_read.saturating_add(call.cache_read);
            counted.cache_write = counted.cache_write.saturating_add(call.cache_write);
            if let Some(model) = &call.model {
                counted.models.insert(model.clone());
            }
        }
        self.changed.notify_waiters();
    }

    /// The calls' usage as the protocol reports it; `None` before any
    /// call passed.
    pub fn usage(&self) -> Option<TokenUsage> {
        let counted = self.counted.lock().unwrap_or_else(|p| p.into_inner());
        if counted.calls == 0 {
            return None;
        }
        let mut usage = TokenUsage {
            prompt_tokens: Some(counted.input),
            completion_tokens: Some(counted.output),
            total_tokens: Some(counted.input.saturating_add(counted.output)),
            ..TokenUsage::default()
        };
        usage
            .extra
            .insert("cache_read_input_tokens".into(), json!(counted.cache_read));
        usage.extra.insert(
            "cache_creation_input_tokens".into(),
            json!(counted.cache_write),
        );
        usage
            .extra
            .insert("model_calls".into(), json!(counted.calls));
        if !counted.models.is_empty() {
            usage.extra.insert("models".into(), json!(counted.models));
        }
        Some(usage)
    }

    /// Wait until a call is added.
    pub async fn changed(&self) {
        self.changed.notified().await;
    }

    /// Wait (at most `within`) for the calls under way to end, so the
    /// turn's usage holds the answers still streaming when it ended.
    pub async fn settled(&self, within: Duration) {
        let until = tokio::time::Instant::now() + within;
        while self.open.load(Ordering::SeqCst) > 0 {
            let changed = self.changed.notified();
            if self.open.load(Ordering::SeqCst) == 0 {
                break;
            }
            if tokio::time::timeout_at(until, changed).await.is_err() {
                break;
            }
        }
    }

    /// From now on every call is refused, saying `why`.
    pub fn refuse(&self, why: String) {
        *self.refusal.lock().unwrap_or_else(|p| p.into_inner()) = Some(why);
    }

    /// The turn is over and its usage is being counted: from now on every
    /// call is refused (unless a budget refused them already), so what
    /// passed is exactly what is counted.
    pub fn close(&self) {
        let mut refusal = self.refusal.lock().unwrap_or_else(|p| p.into_inner());
        if refusal.is_none() {
            *refusal = Some("the turn is over: a model call goes through only during one".into());
        }
    }

    /// Why calls are refused, once they are.
    pub fn refusal(&self) -> Option<String> {
        self.refusal
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// `reported` (the harness's own figures, if any) with the gateway's
/// counts in place of its tokens when the gateway saw the calls: what the
/// harness says besides tokens (a cost) is kept.
pub fn metered_over(
    reported: Option<TokenUsage>,
    metered: Option<TokenUsage>,
) -> Option<TokenUsage> {
    let Some(mut metered) = metered else {
        return reported;
    };
    if let Some(reported) = reported {
        for (key, value) in reported.extra {
            metered.extra.entry(key).or_insert(value);
        }
    }
    Some(metered)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_add_up_and_the_gateways_tokens_win_over_the_harnesss() {
        let meter = Meter::default();
        assert!(meter.usage().is_none());
        meter.record(&CallUsage {
            model: Some("m".into()),
            input: 10,
            output: 5,
            cache_read: 3,
            cache_write: 0,
        });
        meter.record(&CallUsage::default());
        let usage = meter.usage().unwrap();
        assert_eq!(usage.total_tokens, Some(15));
        assert_eq!(usage.extra["model_calls"], 2);
        assert_eq!(usage.extra["cache_read_input_tokens"], 3);
        let mut reported = TokenUsage {
            prompt_tokens: Some(1),
            ..TokenUsage::default()
        };
        reported.extra.insert("total_cost_usd".into(), json!(0.5));
        let merged = metered_over(Some(reported), Some(usage)).unwrap();
        assert_eq!(merged.prompt_tokens, Some(10));
        assert_eq!(merged.extra["total_cost_usd"], 0.5);
        assert!(metered_over(None, None).is_none());
    }
}
