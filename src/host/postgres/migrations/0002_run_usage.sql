-- What each run cost, one row per run, written by the bridge at its end
-- (host::usage). Summed by actor, conversation, harness, model or day.
CREATE TABLE run_usage (
    run_id              TEXT PRIMARY KEY,
    bot_id              TEXT,
    conversation_id     TEXT,
    actor_id            TEXT,
    harness             TEXT NOT NULL,
    model               TEXT,
    started_ms          BIGINT NOT NULL,
    ended_ms            BIGINT NOT NULL,
    outcome             TEXT NOT NULL,
    code                TEXT,
    input_tokens        BIGINT NOT NULL,
    output_tokens       BIGINT NOT NULL,
    cache_read_tokens   BIGINT NOT NULL,
    cache_write_tokens  BIGINT NOT NULL,
    cost_usd            DOUBLE PRECISION
);
CREATE INDEX run_usage_by_actor ON run_usage (actor_id, ended_ms);
CREATE INDEX run_usage_by_time ON run_usage (ended_ms);
