-- Host store on PostgreSQL, migration 1: the embedded store's tables, for
-- many bridges on one database. Times are epoch milliseconds, JSON is text
-- (the same bytes the SQLite store keeps).

CREATE EXTENSION IF NOT EXISTS unaccent;
CREATE EXTENSION IF NOT EXISTS btree_gin;

-- Search words as the SQLite store's (porter, unicode61, diacritics
-- removed): English stems with no stop words, accents folded; CJK text
-- arrives spaced into one-character words (`host::words`).
CREATE TEXT SEARCH DICTIONARY hb_english (TEMPLATE = snowball, Language = english);
CREATE TEXT SEARCH CONFIGURATION hb_search (COPY = simple);
ALTER TEXT SEARCH CONFIGURATION hb_search
    ALTER MAPPING FOR asciiword, asciihword, hword_asciipart, word, hword, hword_part
    WITH unaccent, hb_english;

CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value BYTEA NOT NULL
);

CREATE TABLE streams (
    id               BIGSERIAL PRIMARY KEY,
    conversation_id  TEXT NOT NULL,
    thread_id        TEXT NOT NULL DEFAULT '',
    transcript_seq   BIGINT NOT NULL DEFAULT 0,
    event_seq        BIGINT NOT NULL DEFAULT 0,
    UNIQUE (conversation_id, thread_id)
);

CREATE TABLE events (
    id              BIGSERIAL PRIMARY KEY,
    stream_id       BIGINT REFERENCES streams (id),
    seq             BIGINT,
    event_id        TEXT NOT NULL UNIQUE,
    event_type      TEXT NOT NULL,
    event_time      BIGINT,
    source          TEXT NOT NULL,
    bot_id          TEXT,
    workspace_id    TEXT,
    conversation_id TEXT,
    thread_id       TEXT,
    actor_type      TEXT,
    actor_id        TEXT,
    actor_name      TEXT,
    subject_type    TEXT,
    subject_id      TEXT,
    input_summary   TEXT,
    input_ref       TEXT,
    raw_ref         TEXT,
    created_at      BIGINT NOT NULL,
    metadata        TEXT NOT NULL DEFAULT '{}'
);
CREATE UNIQUE INDEX events_by_stream ON events (stream_id, seq);

CREATE TABLE transcript (
    stream_id      BIGINT NOT NULL REFERENCES streams (id),
    seq            BIGINT NOT NULL,
    transcript_id  TEXT NOT NULL UNIQUE,
    event_id       TEXT NOT NULL,
    bot_id         TEXT,
    workspace_id   TEXT,
    role           TEXT NOT NULL,
    item_type      TEXT NOT NULL,
    content        TEXT,
    content_json   TEXT,
    artifact_refs  TEXT NOT NULL DEFAULT '[]',
    created_at     BIGINT NOT NULL,
    metadata       TEXT NOT NULL DEFAULT '{}',
    -- The content as `hb_search` words; NULL when there is none.
    words          TSVECTOR,
    PRIMARY KEY (stream_id, seq)
);
-- One conversation's matches without walking every conversation's.
CREATE INDEX transcript_words ON transcript USING gin (stream_id, words);

CREATE TABLE artifacts (
    artifact_id     TEXT PRIMARY KEY,
    artifact_type   TEXT NOT NULL,
    mime_type       TEXT,
    name            TEXT,
    size_bytes      BIGINT NOT NULL,
    sha256          TEXT NOT NULL,
    source          TEXT NOT NULL,
    conversation_id TEXT,
    run_id          TEXT,
    runner_id       TEXT,
    created_at      BIGINT NOT NULL,
    expires_at      BIGINT,
    metadata        TEXT NOT NULL DEFAULT '{}'
);

-- Contents by digest: identical bytes are stored once.
CREATE TABLE artifact_contents (
    sha256   TEXT PRIMARY KEY,
    content  BYTEA NOT NULL
);

CREATE TABLE state (
    scope       TEXT NOT NULL,
    owner       TEXT NOT NULL,
    key         TEXT NOT NULL,
    value       TEXT NOT NULL,
    updated_at  BIGINT NOT NULL,
    PRIMARY KEY (scope, owner, key)
);

CREATE TABLE storage (
    area        TEXT NOT NULL,
    owner       TEXT NOT NULL,
    key         TEXT NOT NULL,
    value       BYTEA NOT NULL,
    updated_at  BIGINT NOT NULL,
    PRIMARY KEY (area, owner, key)
);

CREATE TABLE audit (
    id          BIGSERIAL PRIMARY KEY,
    at_ms       BIGINT NOT NULL,
    run_id      TEXT NOT NULL,
    runner_id   TEXT NOT NULL,
    action      TEXT NOT NULL,
    resource    TEXT NOT NULL,
    scope       TEXT NOT NULL,
    outcome     TEXT NOT NULL,
    detail      TEXT NOT NULL
);
CREATE INDEX audit_by_run ON audit (run_id, id);
CREATE INDEX audit_by_time ON audit (at_ms);
