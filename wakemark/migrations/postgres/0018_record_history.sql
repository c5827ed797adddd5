-- A record's older versions. A record that a newer one about the same subject replaced
-- leaves memory_records (so no search, list or injection sees it) and is kept here,
-- linked to its successor and to the current record of its subject, until a person
-- splits it out again or the current record is deleted.
CREATE TABLE record_history (
    record_id     text PRIMARY KEY,
    current_id    text NOT NULL REFERENCES memory_records (record_id) ON DELETE CASCADE,
    superseded_by text NOT NULL,
    namespace     text COLLATE "C" NOT NULL,
    superseded_at timestamptz NOT NULL,
    body          jsonb NOT NULL
);

CREATE INDEX record_history_by_current ON record_history (current_id, superseded_at);
CREATE INDEX record_history_by_namespace ON record_history (namespace, record_id);
