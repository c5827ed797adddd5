-- When a person corrected a record's title, summary or facts (NULL: never edited).
ALTER TABLE memory_records ADD COLUMN edited_at timestamptz;

-- A record's provenance lists the turns of its session (the viewer's record page).
CREATE INDEX turns_by_session ON turns (session_id, opened_at);
