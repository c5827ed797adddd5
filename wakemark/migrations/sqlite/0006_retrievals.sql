-- The audit of prompt-time retrievals: what the relevance gate saw and decided for each
-- prompt. Ids and scores only, never prompt or record text. A row lives as long as its
-- prompt event (deleting the event deletes it).
CREATE TABLE retrievals (
    retrieval_id TEXT PRIMARY KEY,
    event_id TEXT NOT NULL REFERENCES events (event_id) ON DELETE CASCADE,
    namespace TEXT NOT NULL,
    session_id TEXT NOT NULL,
    created_at TEXT NOT NULL,
    body TEXT NOT NULL
) STRICT;

CREATE INDEX retrievals_by_namespace ON retrievals (namespace, created_at DESC, retrieval_id DESC);
CREATE INDEX retrievals_by_session
    ON retrievals (session_id, namespace, created_at DESC, retrieval_id DESC);
CREATE INDEX retrievals_by_event ON retrievals (event_id);
