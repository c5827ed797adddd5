-- The audit of prompt-time retrievals: what the relevance gate saw and decided for each
-- prompt. Ids and scores only, never prompt or record text. A row lives as long as its
-- prompt event (deleting the event deletes it).
CREATE TABLE retrievals (
    retrieval_id text PRIMARY KEY,
    event_id     text NOT NULL REFERENCES events (event_id) ON DELETE CASCADE,
    namespace    text COLLATE "C" NOT NULL,
    session_id   text NOT NULL,
    created_at   timestamptz NOT NULL,
    body         jsonb NOT NULL
);
CREATE INDEX retrievals_by_namespace ON retrievals (namespace, created_at DESC, retrieval_id DESC);
CREATE INDEX retrievals_by_session
    ON retrievals (session_id, namespace, created_at DESC, retrieval_id DESC);
CREATE INDEX retrievals_by_event ON retrievals (event_id);
