//! The codes a `run.failed` carries: one declaration for every producer
//! (the decoders, the turn, `serve`, the relay, the cluster) and for the
//! LangBot plugin, whose copy `harness-bridge failure-codes` prints.
//!
//! A host shows the sentence (`error`) to the person and keys retries and
//! metrics on the code, so a code names a cause the operator can act on,
//! never a place in our code. The enum stays open: a code from a newer
//! peer (or one a harness spec's decoder passes through) is kept verbatim.

open_enum!(
    /// Why a run failed (`run.failed.data.code`).
    FailureCode, Other {
        /// The harness program is not installed or not executable; the
        /// sentence carries the install hint.
        HarnessNotFound = "harness_not_found",
        /// The harness ended badly; the sentence carries its last stderr
        /// lines, secrets redacted.
        HarnessError = "harness_error",
        /// The harness was killed by a signal it did not ask for.
        HarnessKilled = "harness_killed",
        /// The harness has no credentials for its model; the sentence
        /// names the key (or login) it needs.
        NotSignedIn = "not_signed_in",
        /// The harness stopped at its own turn limit.
        MaxTurns = "max_turns",
        /// The run's deadline passed before the harness finished.
        DeadlineExceeded = "deadline_exceeded",
        /// A person or the host cancelled the run.
        Cancelled = "cancelled",
        /// The context, binding or request was refused before anything ran.
        InvalidArgument = "invalid_argument",
        /// The conversation's workspace could not be written.
        WorkspaceError = "workspace_error",
        /// The conversation hit one of its resource limits (memory,
        /// processes), named in the sentence.
        ResourceLimit = "resource_limit",
        /// The instance running the turn went away; a retry starts over.
        Interrupted = "interrupted",
        /// The turn's results outgrew what one run may keep.
        OutputTooLarge = "output_too_large",
        /// The bridge's queue (the conversation's, or all of it) is full;
        /// the same request may be sent again shortly.
        RateLimited = "rate_limited",
        /// A limit the operator set for the person, the conversation or
        /// the bot (turns a minute; tokens or cost a day or a month) is
        /// reached; the sentence says which, and when it resets.
        LimitReached = "limit_reached",
        /// A bug in the bridge (a panicked run task); the log has the rest.
        InternalError = "internal_error",
        /// The host side failed in a way no other code names.
        RuntimeError = "runtime_error",
        /// The LangBot plugin could not deliver the reply to the chat.
        DeliveryFailed = "delivery_failed",
    }
);

impl From<&str> for FailureCode {
    fn from(code: &str) -> Self {
        FailureCode::from(code.to_string())
    }
}

impl PartialEq<str> for FailureCode {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_round_trips_by_its_wire_name() {
        for code in FailureCode::ALL {
            assert_eq!(&FailureCode::from(code.as_str()), code);
        }
        assert_eq!(
            FailureCode::from("a_newer_code"),
            FailureCode::Other("a_newer_code".into())
        );
    }

    #[test]
    fn all_lists_each_declared_code_once() {
        let mut names: Vec<&str> = FailureCode::ALL.iter().map(FailureCode::as_str).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), FailureCode::ALL.len());
    }
}
