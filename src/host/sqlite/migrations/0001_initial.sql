-- Embedded host store, migration 1: the first schema.
-- Conversations are split into streams (conversation id + thread id); each
-- stream numbers its transcript items and events 1, 2, 3, ... so that pages
-- are exact ranges over (stream_id, seq) and counts are O(1).

CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value BLOB NOT NULL
);

CREATE TABLE IF NOT EXISTS streams (
    id               INTEGER PRIMARY KEY,
    conversation_id  TEXT NOT NULL,
    thread_id        TEXT NOT NULL DEFAULT '',
    transcript_seq   INTEGER NOT NULL DEFAULT 0,
    event_seq        INTEGER NOT NULL DEFAULT 0,
    UNIQUE (conversation_id, thread_id)
);

CREATE TABLE IF NOT EXISTS events (
    id              INTEGER PRIMARY KEY,
    stream_id       INTEGER REFERENCES streams(id),
    seq             INTEGER,
    event_id        TEXT NOT NULL UNIQUE,
    event_type      TEXT NOT NULL,
    event_time      INTEGER,
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
    created_at      INTEGER NOT NULL,
    metadata        TEXT NOT NULL DEFAULT '{}'
);
CREATE UNIQUE INDEX IF NOT EXISTS events_by_stream ON events (stream_id, seq);

CREATE TABLE IF NOT EXISTS transcript (
    id             INTEGER PRIMARY KEY,
    stream_id      INTEGER NOT NULL REFERENCES streams(id),
    seq            INTEGER NOT NULL,
    transcript_id  TEXT NOT NULL UNIQUE,
    event_id       TEXT NOT NULL,
    bot_id         TEXT,
    workspace_id   TEXT,
    role           TEXT NOT NULL,
    item_type      TEXT NOT NULL,
    content        TEXT,
    content_json   TEXT,
    artifact_refs  TEXT NOT NULL DEFAULT '[]',
    created_at     INTEGER NOT NULL,
    metadata       TEXT NOT NULL DEFAULT '{}',
    UNIQUE (stream_id, seq)
);

-- Full-text index of transcript content. Contentless: the text lives in
-- `transcript`. The rowid is (stream_id << 32) | seq, so one conversation's
-- rows form one contiguous rowid range: a search seeks straight into that
-- range of each term's doclist instead of walking every conversation's
-- postings. `body` has CJK characters spaced out so that a phrase query
-- matches any run of them (CJK text has no spaces between words).
CREATE VIRTUAL TABLE IF NOT EXISTS transcript_fts USING fts5 (
    body,
    content = '', contentless_delete = 1,
    tokenize = 'porter unicode61 remove_diacritics 2'
);

CREATE TABLE IF NOT EXISTS artifacts (
    artifact_id     TEXT PRIMARY KEY,
    artifact_type   TEXT NOT NULL,
    mime_type       TEXT,
    name            TEXT,
    size_bytes      INTEGER NOT NULL,
    sha256          TEXT NOT NULL,
    source          TEXT NOT NULL,
    conversation_id TEXT,
    run_id          TEXT,
    runner_id       TEXT,
    created_at      INTEGER NOT NULL,
    expires_at      INTEGER,
    metadata        TEXT NOT NULL DEFAULT '{}'
);

CREATE TABLE IF NOT EXISTS state (
    scope       TEXT NOT NULL,
    owner       TEXT NOT NULL,
    key         TEXT NOT NULL,
    value       TEXT NOT NULL,
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (scope, owner, key)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS storage (
    area        TEXT NOT NULL,
    owner       TEXT NOT NULL,
    key         TEXT NOT NULL,
    value       BLOB NOT NULL,
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (area, owner, key)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS audit (
    id          INTEGER PRIMARY KEY,
    at_ms       INTEGER NOT NULL,
    run_id      TEXT NOT NULL,
    runner_id   TEXT NOT NULL,
    action      TEXT NOT NULL,
    resource    TEXT NOT NULL,
    scope       TEXT NOT NULL,
    outcome     TEXT NOT NULL,
    detail      TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_by_run ON audit (run_id, id);

-- Knowledge bases: folders the operator names (`knowledge_bases` in
-- bridge.yaml), indexed for `retrieve_knowledge`. A file is indexed again
-- only when its digest changed. Chunks are paragraphs of a file, a few
-- hundred words each; their full-text rowid is (knowledge base << 40) |
-- chunk id, so a search seeks into one base's rowid range only.
CREATE TABLE IF NOT EXISTS knowledge_bases (
    id      INTEGER PRIMARY KEY,
    kb_id   TEXT NOT NULL UNIQUE
);

CREATE TABLE IF NOT EXISTS knowledge_files (
    id      INTEGER PRIMARY KEY,
    kb      INTEGER NOT NULL REFERENCES knowledge_bases (id),
    path    TEXT NOT NULL,
    digest  TEXT NOT NULL,
    UNIQUE (kb, path)
);

CREATE TABLE IF NOT EXISTS knowledge_chunks (
    id      INTEGER PRIMARY KEY,
    file    INTEGER NOT NULL REFERENCES knowledge_files (id),
    seq     INTEGER NOT NULL,
    text    TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS knowledge_chunks_file ON knowledge_chunks (file);

CREATE VIRTUAL TABLE IF NOT EXISTS knowledge_fts USING fts5 (
    body,
    content = '', contentless_delete = 1,
    tokenize = 'porter unicode61 remove_diacritics 2'
);
