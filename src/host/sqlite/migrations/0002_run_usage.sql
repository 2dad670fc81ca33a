-- What each run cost, one row per run, written by the bridge at its end
-- (host::usage). Summed by actor, conversation, harness, model or day.
CREATE TABLE IF NOT EXISTS run_usage (
    run_id              TEXT PRIMARY KEY,
    bot_id              TEXT,
    conversation_id     TEXT,
    actor_id            TEXT,
    harness             TEXT NOT NULL,
    model               TEXT,
    started_ms          INTEGER NOT NULL,
    ended_ms            INTEGER NOT NULL,
    outcome             TEXT NOT NULL,
    code                TEXT,
    input_tokens        INTEGER NOT NULL,
    output_tokens       INTEGER NOT NULL,
    cache_read_tokens   INTEGER NOT NULL,
    cache_write_tokens  INTEGER NOT NULL,
    cost_usd            REAL
);
CREATE INDEX IF NOT EXISTS run_usage_by_actor ON run_usage (actor_id, ended_ms);
CREATE INDEX IF NOT EXISTS run_usage_by_time ON run_usage (ended_ms);
