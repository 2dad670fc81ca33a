-- The operator's budgets (host::budget): the turns admitted in the last
-- minute, one row per run, counted by the turn rates and forgotten once
-- a minute old; and each person's, conversation's and bot's spending by
-- UTC day and month, a running total the ledger adds each run to, so an
-- admission reads two rows however many runs there were.
CREATE TABLE IF NOT EXISTS run_admissions (
    run_id              TEXT PRIMARY KEY,
    actor_id            TEXT,
    conversation_id     TEXT,
    bot_id              TEXT,
    at_ms               INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS run_admissions_by_actor ON run_admissions (actor_id, at_ms);
CREATE INDEX IF NOT EXISTS run_admissions_by_conversation ON run_admissions (conversation_id, at_ms);
CREATE INDEX IF NOT EXISTS run_admissions_by_bot ON run_admissions (bot_id, at_ms);
CREATE INDEX IF NOT EXISTS run_admissions_by_time ON run_admissions (at_ms);
CREATE TABLE IF NOT EXISTS spend_totals (
    per                 TEXT NOT NULL,
    id                  TEXT NOT NULL,
    period              TEXT NOT NULL,
    start_ms            INTEGER NOT NULL,
    tokens              INTEGER NOT NULL,
    cost_usd            REAL NOT NULL,
    PRIMARY KEY (per, id, period, start_ms)
);
-- What the ledger held before: summed into the totals once.
INSERT INTO spend_totals (per, id, period, start_ms, tokens, cost_usd)
SELECT per, id, period, start_ms, SUM(tokens), SUM(cost_usd) FROM (
    SELECT 'actor' AS per, actor_id AS id, 'day' AS period,
           (ended_ms / 86400000) * 86400000 AS start_ms,
           input_tokens + output_tokens AS tokens, COALESCE(cost_usd, 0) AS cost_usd
      FROM run_usage WHERE actor_id IS NOT NULL AND actor_id <> ''
    UNION ALL
    SELECT 'actor', actor_id, 'month',
           CAST(strftime('%s', ended_ms / 1000, 'unixepoch', 'start of month') AS INTEGER) * 1000,
           input_tokens + output_tokens, COALESCE(cost_usd, 0)
      FROM run_usage WHERE actor_id IS NOT NULL AND actor_id <> ''
    UNION ALL
    SELECT 'conversation', conversation_id, 'day', (ended_ms / 86400000) * 86400000,
           input_tokens + output_tokens, COALESCE(cost_usd, 0)
      FROM run_usage WHERE conversation_id IS NOT NULL AND conversation_id <> ''
    UNION ALL
    SELECT 'conversation', conversation_id, 'month',
           CAST(strftime('%s', ended_ms / 1000, 'unixepoch', 'start of month') AS INTEGER) * 1000,
           input_tokens + output_tokens, COALESCE(cost_usd, 0)
      FROM run_usage WHERE conversation_id IS NOT NULL AND conversation_id <> ''
    UNION ALL
    SELECT 'bot', bot_id, 'day', (ended_ms / 86400000) * 86400000,
           input_tokens + output_tokens, COALESCE(cost_usd, 0)
      FROM run_usage WHERE bot_id IS NOT NULL AND bot_id <> ''
    UNION ALL
    SELECT 'bot', bot_id, 'month',
           CAST(strftime('%s', ended_ms / 1000, 'unixepoch', 'start of month') AS INTEGER) * 1000,
           input_tokens + output_tokens, COALESCE(cost_usd, 0)
      FROM run_usage WHERE bot_id IS NOT NULL AND bot_id <> ''
) GROUP BY per, id, period, start_ms;
CREATE INDEX IF NOT EXISTS run_usage_by_conversation ON run_usage (conversation_id, ended_ms);
