//! The bridge's counters, in one process-wide registry, so that the layers
//! that see an event (the MCP server sees tool calls, the service sees runs
//! end) count it where it happens, and `serve` exposes them all at
//! `GET /metrics` in Prometheus text format. Commands that never expose them
//! (`run`, `relay`) pay a few atomic adds.

use std::sync::LazyLock;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// A finished run, by how it ended (`code` is empty for a completed run).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RunLabels {
    harness: String,
    outcome: String,
    code: String,
}

/// Tokens of one kind (input, output, cache_read, cache_write) a harness
/// used on a model (`default`: the harness's own choice). No person is a
/// label: the ledger (`host usage`) has who.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TokenLabels {
    harness: String,
    model: String,
    kind: String,
}

/// A harness on a model, for what it cost.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelLabels {
    harness: String,
    model: String,
}

/// An MCP tool call, by tool and outcome (`ok` or the error code).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabels {
    tool: String,
    outcome: String,
}

/// A model call through the gateway: its provider and outcome (the
/// upstream's status class, or `unreachable`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    provider: String,
    outcome: String,
}

/// A model provider at the gateway.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProviderLabels {
    provider: String,
}

/// The buckets of a model call's wait for its answer's headers: a
/// cached answer in tens of milliseconds, a long prompt in seconds.
fn model_call_buckets() -> Histogram {
    Histogram::new([
        0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    ])
}

/// A label set of one `reason` or `start`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Why {
    why: String,
}

/// One live harness process: its harness and process id. Bounded: only
/// idle processes are reported, at most `max_live_sessions` of them.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProcessLabels {
    harness: String,
    pid: String,
}

/// Every metric the bridge keeps.
pub struct Metrics {
    registry: Registry,
    runs: Family<RunLabels, Counter>,
    run_seconds: Histogram,
    tokens: Family<TokenLabels, Counter>,
    cost: Family<ModelLabels, Counter<f64, std::sync::atomic::AtomicU64>>,
    running: Gauge,
    queued: Gauge,
    mcp_calls: Family<ToolLabels, Counter>,
    live_idle: Gauge,
    live_rss: Gauge,
    live_process_rss: Family<ProcessLabels, Gauge>,
    live_turns: Family<Why, Counter>,
    live_stopped: Family<Why, Counter>,
    limits: Family<Limit, Gauge>,
    model_calls: Family<CallLabels, Counter>,
    model_call_seconds: Family<ProviderLabels, Histogram, fn() -> Histogram>,
}

/// One kind of per-conversation limit.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Limit {
    limit: String,
}

static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// The process's metrics.
pub fn global() -> &'static Metrics {
    &METRICS
}

impl Metrics {
    fn new() -> Metrics {
        let mut registry = Registry::with_prefix("harness_bridge");
        let runs = Family::<RunLabels, Counter>::default();
        registry.register(
            "runs",
            "Runs ended, by harness and outcome (completed, failed) with the failure code",
            runs.clone(),
        );
        // Turns last from under a second (a short answer) to the 10-minute
        // default timeout.
        let run_seconds = Histogram::new([
            0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
        ]);
        registry.register(
            "run_duration_seconds",
            "Time from a run's start (after its queue wait) to its terminal result",
            run_seconds.clone(),
        );
        let tokens = Family::<TokenLabels, Counter>::default();
        registry.register(
            "tokens",
            "Tokens runs used, by harness, model (default: the harness's own) and kind (input, output, cache_read, cache_write)",
            tokens.clone(),
        );
        let cost = Family::<ModelLabels, Counter<f64, std::sync::atomic::AtomicU64>>::default();
        registry.register(
            "cost_usd",
            "What runs cost in US dollars, as their harness reported it (runs of a harness that reports none add nothing), by harness and model",
            cost.clone(),
        );
        let running = Gauge::default();
        registry.register(
            "runs_running",
            "Runs whose harness is running",
            running.clone(),
        );
        let queued = Gauge::default();
        registry.register(
            "queue_depth",
            "Turns waiting for their conversation or a free slot",
            queued.clone(),
        );
        let mcp_calls = Family::<ToolLabels, Counter>::default();
        registry.register(
            "mcp_calls",
            "Host tool calls served over MCP, by tool and outcome (ok or the error code)",
            mcp_calls.clone(),
        );
        let live_idle = Gauge::default();
        registry.register(
            "live_sessions_idle",
            "Live harness processes waiting for their conversation's next turn",
            live_idle.clone(),
        );
        let live_rss = Gauge::default();
        registry.register(
            "live_sessions_rss_bytes",
            "Resident memory of the live harness processes, idle or serving a turn, summed",
            live_rss.clone(),
        );
        let live_process_rss = Family::<ProcessLabels, Gauge>::default();
        registry.register(
            "live_session_rss_bytes",
            "Resident memory of each live harness process, idle or serving a turn, by harness and pid",
            live_process_rss.clone(),
        );
        let live_turns = Family::<Why, Counter>::default();
        registry.register(
            "live_turns",
            "Turns on live harness processes, by start: warm (a kept process) or cold (a new one)",
            live_turns.clone(),
        );
        let live_stopped = Family::<Why, Counter>::default();
        registry.register(
            "live_sessions_stopped",
            "Idle live harness processes stopped, by why: idle (idle_timeout_seconds), max_sessions, or changed (the conversation's binding changed)",
            live_stopped.clone(),
        );
        let limits = Family::<Limit, Gauge>::default();
        registry.register(
            "limits_enforced",
            "Whether each per-conversation limit (memory, processes, cpu) is in force: 1 set and enforced, 0 not set or not enforceable here (the start-up log says why)",
            limits.clone(),
        );
        let model_calls = Family::<CallLabels, Counter>::default();
        registry.register(
            "model_calls",
            "Model calls through the gateway of harnesses in a network of their own, by provider and outcome (the upstream's status class: 2xx, 4xx, 5xx; or unreachable)",
            model_calls.clone(),
        );
        let model_call_seconds =
            Family::<ProviderLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                model_call_buckets,
            );
        registry.register(
            "model_call_seconds",
            "Time from a model call's arrival at the gateway to its upstream's answer headers, by provider",
            model_call_seconds.clone(),
        );
        Metrics {
            registry,
            limits,
            model_calls,
            model_call_seconds,
            runs,
            run_seconds,
            tokens,
            cost,
            running,
            queued,
            mcp_calls,
            live_idle,
            live_rss,
            live_process_rss,
            live_turns,
            live_stopped,
        }
    }

    /// A model call through the gateway ended: its provider, outcome and,
    /// when the upstream answered, how long its headers took.
    pub fn model_call(&self, provider: &str, outcome: &str, seconds: Option<f64>) {
        self.model_calls
            .get_or_create(&CallLabels {
                provider: provider.to_string(),
                outcome: outcome.to_string(),
            })
            .inc();
        if let Some(seconds) = seconds {
            self.model_call_seconds
                .get_or_create(&ProviderLabels {
                    provider: provider.to_string(),
                })
                .observe(seconds);
        }
    }

    /// A run left its queue and started.
    pub fn run_started(&self) {
        self.running.inc();
    }

    /// A started run ended: `code` is `None` when it completed.
    pub fn run_ended(&self, harness: &str, code: Option<&str>, seconds: f64) {
        self.running.dec();
        self.run_seconds.observe(seconds);
        self.runs
            .get_or_create(&RunLabels {
                harness: harness.to_string(),
                outcome: if code.is_some() {
                    "failed"
                } else {
                    "completed"
                }
                .into(),
                code: code.unwrap_or_default().to_string(),
            })
            .inc();
    }

    /// A run of `harness` on `model` used `n` tokens of `kind`.
    pub fn tokens(&self, harness: &str, model: Option<&str>, kind: &str, n: u64) {
        if n == 0 {
            return;
        }
        self.tokens
            .get_or_create(&TokenLabels {
                harness: harness.to_string(),
                model: model.unwrap_or("default").to_string(),
                kind: kind.to_string(),
            })
            .inc_by(n);
    }

    /// A run of `harness` on `model` cost `usd`, as the harness said.
    pub fn cost(&self, harness: &str, model: Option<&str>, usd: f64) {
        if usd.is_finite() && usd > 0.0 {
            self.cost
                .get_or_create(&ModelLabels {
                    harness: harness.to_string(),
                    model: model.unwrap_or("default").to_string(),
                })
                .inc_by(usd);
        }
    }

    /// The number of turns waiting now.
    pub fn set_queued(&self, waiting: usize) {
        self.queued.set(i64::try_from(waiting).unwrap_or(i64::MAX));
    }

    /// An MCP tool call ended. `tool` must be a known tool name (callers
    /// map anything else to `unknown`, so a harness cannot grow the label
    /// set without bound).
    pub fn mcp_call(&self, tool: &str, outcome: &str) {
        self.mcp_calls
            .get_or_create(&ToolLabels {
                tool: tool.to_string(),
                outcome: outcome.to_string(),
            })
            .inc();
    }

    /// The live processes now, idle and serving a turn: each one's
    /// harness, pid and resident memory. A process stopped drops out of
    /// the series.
    pub fn set_live(&self, idle: &[(String, u32, u64)], busy: &[(String, u32, u64)]) {
        let bytes = |rss: u64| i64::try_from(rss).unwrap_or(i64::MAX);
        self.live_idle
            .set(i64::try_from(idle.len()).unwrap_or(i64::MAX));
        self.live_rss
            .set(bytes(idle.iter().chain(busy).map(|(_, _, rss)| rss).sum()));
        self.live_process_rss.clear();
        for (harness, pid, rss) in idle.iter().chain(busy) {
            self.live_process_rss
                .get_or_create(&ProcessLabels {
                    harness: harness.clone(),
                    pid: pid.to_string(),
                })
                .set(bytes(*rss));
        }
    }

    /// A turn ran on a live process: `warm` (kept) or `cold` (new).
    pub fn live_turn(&self, start: &str) {
        self.live_turns
            .get_or_create(&Why { why: start.into() })
            .inc();
    }

    /// An idle live process was stopped, and why.
    pub fn live_evicted(&self, why: &str) {
        self.live_stopped
            .get_or_create(&Why { why: why.into() })
            .inc();
    }

    /// Whether the per-conversation `limit` is in force.
    pub fn set_limit_enforced(&self, limit: &str, enforced: bool) {
        self.limits
            .get_or_create(&Limit {
                limit: limit.into(),
            })
            .set(i64::from(enforced));
    }

    /// Everything, in Prometheus text exposition format.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_show_up_in_the_text() {
        let metrics = Metrics::new();
        metrics.run_started();
        metrics.run_ended("codex", Some("cancelled"), 0.3);
        metrics.mcp_call("history_page", "ok");
        metrics.set_queued(3);
        let text = metrics.encode();
        assert!(
            text.contains(
                r#"harness_bridge_runs_total{harness="codex",outcome="failed",code="cancelled"} 1"#
            ),
            "{text}"
        );
        assert!(text.contains(r#"harness_bridge_run_duration_seconds_bucket{le="0.5"} 1"#));
        assert!(
            text.contains(r#"harness_bridge_mcp_calls_total{tool="history_page",outcome="ok"} 1"#)
        );
        assert!(text.contains("harness_bridge_queue_depth 3"));
        assert!(text.contains("harness_bridge_runs_running 0"));
    }
}
