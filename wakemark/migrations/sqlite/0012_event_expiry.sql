-- Expiry beyond retention: trimmed turns are found by extraction time to delete them with
-- their event stubs (WAKEMARK_EVENT_EXPIRY_DAYS), and retrieval audit rows by creation
-- time to delete them with the retention window.
CREATE INDEX turns_expirable ON turns (extracted_at, turn_id) WHERE trimmed_at IS NOT NULL;
CREATE INDEX retrievals_by_time ON retrievals (created_at);
