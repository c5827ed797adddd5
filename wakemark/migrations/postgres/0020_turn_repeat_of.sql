-- A turn whose records all said again what a current record says writes none: it keeps
-- the record its newest one repeated, so the session's later turns still find what it
-- was about (the session's recent records, wakemark.shared.extraction.subject).
ALTER TABLE turns ADD COLUMN repeat_of text;
