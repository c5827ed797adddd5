-- What each record cites in the project's code, checked at injection against the files
-- as they are now. A record's anchors go with it.
CREATE TABLE code_anchors (
    record_id TEXT PRIMARY KEY REFERENCES memory_records (record_id) ON DELETE CASCADE,
    namespace TEXT NOT NULL,
    body TEXT NOT NULL
) STRICT;

CREATE INDEX code_anchors_by_namespace ON code_anchors (namespace, record_id);
