-- The service's shared run queue on PostgreSQL, migration 1: several
-- `serve` instances on one database take turns from here. Times are epoch
-- milliseconds of the database's clock (`hb_now_ms()`), so instances on
-- machines whose clocks differ agree on leases.

CREATE FUNCTION hb_now_ms() RETURNS BIGINT LANGUAGE sql VOLATILE AS
    $$ SELECT (extract(epoch FROM clock_timestamp()) * 1000)::BIGINT $$;

-- One row per live instance, its lease renewed by heartbeats; an instance
-- whose heartbeat is older than the lease is dead, and the first instance
-- to see it ends its running turns and deletes its row.
CREATE TABLE instances (
    id            TEXT PRIMARY KEY,
    boot_id       TEXT NOT NULL,
    addr          TEXT NOT NULL,
    lease_ms      BIGINT NOT NULL,
    started_at    BIGINT NOT NULL,
    heartbeat_at  BIGINT NOT NULL
);

-- Per conversation: the order lock (arrivals serialize on this row), one
-- turn at a time (`busy`), how many wait, and the instance holding its
-- workspace (`owner`, NULL when none: any instance may take it).
CREATE TABLE conv_queue (
    conversation_id  TEXT PRIMARY KEY,
    owner            TEXT,
    busy             BOOLEAN NOT NULL DEFAULT false,
    queued           INTEGER NOT NULL DEFAULT 0,
    next_seq         BIGINT NOT NULL DEFAULT 1,
    head_at          BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX conv_queue_ready ON conv_queue (head_at) WHERE queued > 0 AND NOT busy;
CREATE INDEX conv_queue_by_owner ON conv_queue (owner);

-- Every claim takes a new fence; a run's writes name it.
CREATE SEQUENCE run_fence;

-- One row per accepted turn: `run_id` is the idempotency key, `seq` its
-- place in its conversation.
CREATE TABLE runs (
    run_id            TEXT PRIMARY KEY,
    conversation_id   TEXT NOT NULL,
    seq               BIGINT NOT NULL,
    harness           TEXT NOT NULL,
    -- The AgentRunContext (JSON) until the run ends.
    context           TEXT,
    status            TEXT NOT NULL,
    code              TEXT,
    accepted_by       TEXT NOT NULL,
    owner             TEXT,
    -- The start of the owner that claimed it: a run whose owner's start
    -- is gone is nobody's, and is ended.
    owner_boot        TEXT,
    fence             BIGINT,
    cancel_requested  BOOLEAN NOT NULL DEFAULT false,
    created_at        BIGINT NOT NULL,
    started_at        BIGINT,
    ended_at          BIGINT,
    -- What the owner's machine may kill of it after a crash.
    pgid              INTEGER,
    workspace         TEXT,
    marker            TEXT,
    machine_boot      TEXT,
    UNIQUE (conversation_id, seq)
);
CREATE UNIQUE INDEX runs_one_running ON runs (conversation_id) WHERE status = 'running';
CREATE INDEX runs_queued ON runs (conversation_id, seq) WHERE status = 'queued';
CREATE INDEX runs_running_by_owner ON runs (owner) WHERE status = 'running';
CREATE INDEX runs_ended ON runs (ended_at) WHERE ended_at IS NOT NULL;

-- Results as produced, so any instance can stream or replay a run.
CREATE TABLE run_results (
    run_id  TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    seq     BIGINT NOT NULL,
    body    TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
);
