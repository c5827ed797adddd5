-- The session-start index lists a namespace's pinned records first, then the newest: an
-- index in that order serves it without sorting the namespace.
CREATE INDEX memory_records_pinned_first
    ON memory_records (namespace, pinned DESC, created_at DESC, record_id DESC);
