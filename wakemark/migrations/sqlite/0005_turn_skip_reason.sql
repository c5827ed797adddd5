-- Why an extracted turn gave no memory record (command, meta, trivial, error, empty);
-- NULL for a turn that gave records or is not extracted yet. Its events stay as they
-- are. The partial index lets /health count skips without reading every turn.
ALTER TABLE turns ADD COLUMN skip_reason TEXT;
CREATE INDEX turns_skipped ON turns (skip_reason) WHERE skip_reason IS NOT NULL;
