-- Event retention: when the raw bodies of a turn's events were trimmed to stubs. The
-- partial index holds only extracted turns not trimmed yet (the retention window's), so
-- the periodic job finds the expired ones without reading the rest.
ALTER TABLE turns ADD COLUMN trimmed_at timestamptz;
CREATE INDEX turns_trimmable ON turns (extracted_at, turn_id)
    WHERE extracted_at IS NOT NULL AND trimmed_at IS NULL;
