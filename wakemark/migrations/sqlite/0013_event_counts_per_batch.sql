-- The storage code adds a batch's events to namespace_event_counts with one upsert per
-- project (queries.COUNT_ADDED_EVENTS): this per-row trigger made put_events of a
-- 100-event batch 50-90% slower. Deletes are rare and keep their trigger.
DROP TRIGGER namespace_events_insert;
