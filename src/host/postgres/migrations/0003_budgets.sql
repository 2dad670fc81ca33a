-- The turns admitted in the last minute, one row per run, counted by the
-- operator's turn rates (host::budget) and forgotten once a minute old;
-- and the ledger read by conversation and by bot for their budgets.
CREATE TABLE run_admissions (
    run_id              TEXT PRIMARY KEY,
    actor_id            TEXT,
    conversation_id     TEXT,
    bot_id              TEXT,
    at_ms               BIGINT NOT NULL
);
CREATE INDEX run_admissions_by_actor ON run_admissions (actor_id, at_ms);
CREATE INDEX run_admissions_by_conversation ON run_admissions (conversation_id, at_ms);
CREATE INDEX run_admissions_by_bot ON run_admissions (bot_id, at_ms);
CREATE INDEX run_admissions_by_time ON run_admissions (at_ms);
CREATE INDEX run_usage_by_conversation ON run_usage (conversation_id, ended_ms);
CREATE INDEX run_usage_by_bot ON run_usage (bot_id, ended_ms);
