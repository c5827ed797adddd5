"""Every SQL statement of the SQLite backend, as named constants with bound parameters."""

# A namespace or prefix is the range [:ns_lo, :ns_hi) of wakemark.shared.storage.lexical's
# namespace_range: exact for prefixes, and a range the namespace indexes can seek (a LIKE
# pattern would scan every row).
_NS = "namespace >= :ns_lo AND namespace < :ns_hi"
_R_NS = "r.namespace >= :ns_lo AND r.namespace < :ns_hi"
_T_NS = "t.namespace >= :ns_lo AND t.namespace < :ns_hi"

# --- events and turns -----------------------------------------------------------------
EVENTS_TURNS = """
SELECT event_id, turn_id, namespace FROM events WHERE event_id IN (SELECT value FROM json_each(?))
"""
INSERT_EVENT = """
INSERT INTO events (event_id, parent_event_id, session_id, actor_id, namespace, kind, body,
                    valid_time, source, schema_version, transaction_time, turn_id)
VALUES (:event_id, :parent_event_id, :session_id, :actor_id, :namespace, :kind, :body,
        :valid_time, :source, :schema_version, :transaction_time, :turn_id)
"""
# One row per project for the events a write added (``_count_added_events`` in storage.py): the
# migrations' delete trigger takes them off again. project_path is the newest one seen.
COUNT_ADDED_EVENTS = """
INSERT INTO namespace_event_counts (namespace, events, last_event_at, project_path,
                                    project_path_at)
VALUES (:namespace, :events, :last_event_at, :project_path, :project_path_at)
ON CONFLICT (namespace) DO UPDATE SET
    events = events + excluded.events,
    last_event_at = max(coalesce(last_event_at, ''), excluded.last_event_at),
    project_path = CASE WHEN excluded.project_path_at >= coalesce(project_path_at, '')
                        THEN excluded.project_path ELSE project_path END,
    project_path_at = CASE WHEN excluded.project_path_at >= coalesce(project_path_at, '')
                           THEN excluded.project_path_at ELSE project_path_at END
"""
GET_EVENT = "SELECT * FROM events WHERE event_id = ?"
EVENTS_AFTER = "SELECT * FROM events WHERE event_id > ? ORDER BY event_id LIMIT ?"
REWRITE_EVENT = "UPDATE events SET body = ?, source = ?, actor_id = ? WHERE event_id = ?"
# rename_session: the statements in order, all with :namespace, :old, :new.
RENAME_SESSION = (
    """UPDATE turns SET closed_at = last_event_at
    WHERE namespace = :namespace AND session_id = :old AND closed_at IS NULL
      AND EXISTS (SELECT 1 FROM turns WHERE namespace = :namespace AND session_id = :new
                  AND closed_at IS NULL)""",
    "UPDATE turns SET session_id = :new WHERE namespace = :namespace AND session_id = :old",
    "UPDATE retrievals SET session_id = :new WHERE namespace = :namespace AND session_id = :old",
    "UPDATE events SET session_id = :new WHERE namespace = :namespace AND session_id = :old",
)
INSERT_RETRIEVAL = """
INSERT INTO retrievals (retrieval_id, event_id, namespace, session_id, created_at, body)
VALUES (:retrieval_id, :event_id, :namespace, :session_id, :created_at, :body)
"""
GET_RETRIEVAL = "SELECT * FROM retrievals WHERE retrieval_id = ?"
# Keyed (one session, after a page key): a session's rows come off retrievals_by_session.
LIST_RETRIEVALS = {
    (session, keyset): f"""
SELECT * FROM retrievals
WHERE {_NS} {"AND session_id = :session_id" if session else ""}
{"AND (created_at, retrieval_id) < (:after_at, :after_id)" if keyset else ""}
ORDER BY created_at DESC, retrieval_id DESC LIMIT :limit
"""
    for session in (False, True)
    for keyset in (False, True)
}
RETRIEVAL_SESSIONS = {
    keyset: f"""
SELECT * FROM retrieval_sessions WHERE namespace = :namespace
{"AND (last_at, session_id) < (:after_at, :after_id)" if keyset else ""}
ORDER BY last_at DESC, session_id DESC LIMIT :limit
"""
    for keyset in (False, True)
}
RETRIEVAL_TOTALS = f"""
SELECT coalesce(sum(prompts), 0) AS prompts, coalesce(sum(injected), 0) AS injected,
       coalesce(sum(records), 0) AS records, coalesce(sum(bytes), 0) AS bytes,
       coalesce(sum(latency_ms), 0.0) AS latency_ms
  FROM retrieval_sessions WHERE {_NS}
"""
# Keyed by "one full namespace": then the order comes straight off events_by_namespace
# (a range would sort every event of the namespace first: ~100 ms at 150k events).
LIST_EVENTS = {
    exact: f"""
SELECT * FROM events
WHERE {"namespace = :ns_lo" if exact else _NS}
  AND (:session_id IS NULL OR session_id = :session_id)
ORDER BY transaction_time DESC, event_id DESC LIMIT :limit
"""
    for exact in (False, True)
}
OPEN_TURN = "SELECT turn_id FROM turns WHERE namespace = ? AND session_id = ? AND closed_at IS NULL"
INSERT_TURN = """
INSERT INTO turns (turn_id, namespace, session_id, opened_at, last_event_at, closed_at)
VALUES (:turn_id, :namespace, :session_id, :now, :now, :closed_at)
"""
TOUCH_TURN = "UPDATE turns SET last_event_at = :now WHERE turn_id = :turn_id"
CLOSE_TURN = "UPDATE turns SET closed_at = :now WHERE turn_id = :turn_id AND closed_at IS NULL"
GET_TURNS = "SELECT * FROM turns WHERE turn_id IN (SELECT value FROM json_each(?))"
TURNS_EVENTS = """
SELECT * FROM events WHERE turn_id IN (SELECT value FROM json_each(?))
ORDER BY turn_id, valid_time, event_id
"""
SESSION_TURNS = """
SELECT turn_id, opened_at, closed_at, extracted_at, record_ids, skip_reason FROM turns
WHERE namespace = ? AND session_id = ? ORDER BY opened_at, turn_id LIMIT ?
"""
COUNT_EVENTS = "SELECT count(*) FROM events WHERE event_id IN (SELECT value FROM json_each(?))"
DELETE_EVENTS = "DELETE FROM events WHERE event_id IN (SELECT value FROM json_each(?))"
CLOSE_IDLE_TURNS = """
UPDATE turns SET closed_at = :now WHERE closed_at IS NULL AND last_event_at < :before
RETURNING turn_id
"""
PENDING_TURNS = """
SELECT turn_id FROM turns WHERE closed_at IS NOT NULL AND extracted_at IS NULL
ORDER BY closed_at, turn_id LIMIT ?
"""
# Conditional: of two workers racing on one turn, exactly one sees rowcount 1. Extracting
# also closes the turn, so no later event can join a turn whose records are written.
MARK_TURN_EXTRACTED = """
UPDATE turns SET extracted_at = :now, record_ids = :record_ids, skip_reason = :skip_reason,
                 closed_at = coalesce(closed_at, :now)
WHERE turn_id = :turn_id AND extracted_at IS NULL
"""

# --- memory records -------------------------------------------------------------------
# Every column but the id and the embedding: what a MemoryRecord is built from.
RECORD_COLUMNS = """record_id, namespace, title, summary, facts, concepts, files_touched,
observation_type, source_event_ids, strategy, quality, pinned, created_at, edited_at"""
# No edited_at: a record is written unedited; only EDIT_RECORD sets it.
INSERT_RECORD = """
INSERT INTO memory_records (record_id, namespace, title, summary, facts, facts_text, concepts,
    files_touched, observation_type, source_event_ids, strategy, quality, pinned, created_at)
VALUES (:record_id, :namespace, :title, :summary, :facts, :facts_text, :concepts,
    :files_touched, :observation_type, :source_event_ids, :strategy, :quality, :pinned,
    :created_at)
"""
RECORD_EXISTS = "SELECT 1 FROM memory_records WHERE record_id = ?"
REPLACE_RECORD_TEXT = """
UPDATE memory_records SET title = :title, summary = :summary, facts = :facts,
    facts_text = :facts_text, concepts = :concepts, files_touched = :files_touched,
    embedding = NULL
WHERE record_id = :record_id RETURNING namespace
"""
SET_EMBEDDING = "UPDATE memory_records SET embedding = ? WHERE record_id = ? RETURNING namespace"
DELETE_RECORDS = """
DELETE FROM memory_records WHERE record_id IN (SELECT value FROM json_each(?))
RETURNING record_id, namespace
"""
GET_RECORD = "SELECT * FROM memory_records WHERE record_id = ?"
GET_RECORDS = "SELECT * FROM memory_records WHERE record_id IN (SELECT value FROM json_each(?))"
COUNT_RECORDS = f"SELECT coalesce(sum(memories), 0) FROM namespace_record_counts WHERE {_NS}"
# A page of records, keyed (pinned first, one full namespace, after a page key). For one
# namespace the order comes straight off memory_by_namespace / memory_pinned_first
# (migration 0004) and a page key is a seek into it; a prefix spanning namespaces sorts
# what it matched.
_KEYS = {False: "created_at, record_id", True: "pinned, created_at, record_id"}
_AFTER = {False: ":after_at, :after_id", True: ":after_pinned, :after_at, :after_id"}
LIST_RECORDS = {
    (pinned, exact, keyset): f"""
SELECT * FROM memory_records WHERE {"namespace = :ns_lo" if exact else _NS}
{f"AND ({_KEYS[pinned]}) < ({_AFTER[pinned]})" if keyset else ""}
ORDER BY {_KEYS[pinned].replace(",", " DESC,")} DESC LIMIT :limit
"""
    for pinned in (False, True)
    for exact in (False, True)
    for keyset in (False, True)
}
SET_PINNED = "UPDATE memory_records SET pinned = ? WHERE record_id = ? RETURNING *"
# A None field is left as it is; the update trigger re-indexes the full-text entry.
EDIT_RECORD = """
UPDATE memory_records SET
  title = coalesce(:title, title),
  summary = coalesce(:summary, summary),
  facts = coalesce(:facts, facts),
  facts_text = coalesce(:facts_text, facts_text),
  edited_at = :now,
  embedding = NULL
WHERE record_id = :record_id RETURNING *
"""
FIND_RECORDS = f"""
SELECT r.record_id FROM memory_records r
WHERE {_R_NS}
  AND (:observation_type IS NULL OR r.observation_type = :observation_type)
  AND (:before IS NULL OR r.created_at < :before)
  AND (:after IS NULL OR r.created_at >= :after)
  AND (:pinned IS NULL OR r.pinned = :pinned)
  AND (:session_id IS NULL OR EXISTS (
        SELECT 1 FROM json_each(r.source_event_ids) j JOIN events e ON e.event_id = j.value
        WHERE e.session_id = :session_id))
ORDER BY r.created_at, r.record_id
"""
TIMELINE_BEFORE = """
SELECT * FROM memory_records
WHERE namespace = :namespace AND (created_at, record_id) < (:created_at, :record_id)
ORDER BY created_at DESC, record_id DESC LIMIT :n
"""
TIMELINE_AFTER = """
SELECT * FROM memory_records
WHERE namespace = :namespace AND (created_at, record_id) > (:created_at, :record_id)
ORDER BY created_at, record_id LIMIT :n
"""
HAS_EMBEDDING = "SELECT embedding IS NOT NULL FROM memory_records WHERE record_id = ?"
# :since is -1 for everything (rows embedded before migration 0003 are stamped 0).
EMBEDDINGS_SNAPSHOT = f"""
SELECT (SELECT value FROM embedding_seq WHERE id = 1) AS watermark, count(*) AS total,
       count(*) FILTER (WHERE embedded_seq > :since) AS changed
FROM memory_records WHERE {_NS} AND embedding IS NOT NULL
"""
LIST_EMBEDDINGS = f"""
SELECT record_id, created_at, observation_type, embedding FROM memory_records
WHERE {_NS} AND embedding IS NOT NULL AND embedded_seq > :since ORDER BY created_at, record_id
"""
EMBEDDED_IDS = f"SELECT record_id FROM memory_records WHERE {_NS} AND embedding IS NOT NULL"
MISSING_EMBEDDING = f"""
SELECT * FROM memory_records WHERE embedding IS NULL AND {_NS}
ORDER BY created_at, record_id LIMIT :limit
"""
CLEAR_EMBEDDINGS = f"""
UPDATE memory_records SET embedding = NULL WHERE embedding IS NOT NULL AND {_NS}
RETURNING namespace
"""

# --- search ---------------------------------------------------------------------------
_FILTERS = """
AND (:observation_type IS NULL OR r.observation_type = :observation_type)
AND (:since IS NULL OR r.created_at >= :since)
"""
# bm25 is lower-is-better; column weights put title above summary above facts, and the
# scope column (namespace tokens, migration 0002) nowhere. :after bounds the ranked rows
# (wakemark.shared.storage.sqlite.fts). RANK_FTS ranks the index alone, for a MATCH that is exact
# for the namespace; RANK_FTS_CHECKED joins the records for the namespace test and filters.
_BM25 = "bm25(memory_fts, 4.0, 2.0, 1.0, 0.0)"
RANK_FTS = f"""
SELECT rowid, {_BM25} AS score FROM memory_fts
WHERE memory_fts MATCH :match AND rowid > :after
ORDER BY score LIMIT :limit
"""
RANK_FTS_CHECKED = f"""
SELECT memory_fts.rowid, {_BM25} AS score FROM memory_fts
JOIN memory_records r ON r.id = memory_fts.rowid
WHERE memory_fts MATCH :match AND memory_fts.rowid > :after AND {_R_NS} {_FILTERS}
ORDER BY score LIMIT :limit
"""
# The ranked rows' records (the namespace tested again), with their index rowid.
RANKED_RECORDS = f"""
SELECT id, {RECORD_COLUMNS} FROM memory_records
WHERE id IN (SELECT value FROM json_each(:ids)) AND {_NS}
"""
SEARCH_SUBSTRING = f"""
SELECT * FROM (
  SELECT r.* FROM memory_records r
  WHERE {_R_NS} {_FILTERS}
  ORDER BY r.created_at DESC, r.record_id ASC
  LIMIT :scan) r
WHERE r.title LIKE :pattern ESCAPE '\\' OR r.summary LIKE :pattern ESCAPE '\\'
   OR r.facts_text LIKE :pattern ESCAPE '\\'
ORDER BY r.created_at DESC, r.record_id ASC
LIMIT :limit
"""
# One fragment of three characters or more, as a phrase of the trigram index (migration
# 0007; its tokenizer folds case): the newest of its first :candidates matches.
SEARCH_TRIGRAM = f"""
SELECT * FROM (
  SELECT r.* FROM memory_trgm JOIN memory_records r ON r.id = memory_trgm.rowid
  WHERE memory_trgm MATCH :match AND {_R_NS} {_FILTERS}
  LIMIT :candidates) r
ORDER BY r.created_at DESC, r.record_id ASC
LIMIT :limit
"""

# --- stats ----------------------------------------------------------------------------
# events, memories and embedded come from the counts the triggers of migration 0011 keep:
# one row per project, however many events and records it holds.
STATS = f"""
SELECT
  (SELECT coalesce(sum(events), 0) FROM namespace_event_counts WHERE {_NS}) AS events,
  (SELECT coalesce(sum(memories), 0) FROM namespace_record_counts WHERE {_NS}) AS memories,
  (SELECT coalesce(sum(embedded), 0) FROM namespace_record_counts WHERE {_NS}) AS embedded,
  -- from the unextracted turns (a partial index) to their events: costs what is
  -- pending, not what is stored (counting from the events read all of them)
  (SELECT count(*) FROM turns t JOIN events e ON e.turn_id = t.turn_id
    WHERE t.extracted_at IS NULL AND {_T_NS}) AS pending_extraction,
  (SELECT coalesce(sum(memories - embedded), 0) FROM namespace_record_counts WHERE {_NS})
    AS pending_embedding
"""
SKIPPED_TURNS = """
SELECT skip_reason, count(*) AS n FROM turns WHERE skip_reason IS NOT NULL GROUP BY skip_reason
"""
PROJECTS = """
WITH names AS (
  SELECT namespace FROM namespace_event_counts WHERE events > 0
  UNION SELECT namespace FROM namespace_record_counts WHERE memories > 0
)
SELECT n.namespace, coalesce(e.events, 0) AS event_count, coalesce(r.memories, 0) AS memory_count,
       nullif(max(coalesce(e.last_event_at, ''), coalesce(r.last_record_at, '')), '')
         AS last_activity,
       e.project_path
  FROM names n
  LEFT JOIN namespace_event_counts e ON e.namespace = n.namespace
  LEFT JOIN namespace_record_counts r ON r.namespace = n.namespace
 ORDER BY last_activity DESC, n.namespace
"""
PING = "SELECT 1"

# --- export and import ----------------------------------------------------------------
# Keyset pages in id order: each page seeks the unique index past the last id, so an
# export of a million rows costs the same per page from start to end. The unary + keeps
# SQLite off the namespace index, whose rows it would have to sort again for every page.
_PLUS_NS = "+namespace >= :ns_lo AND +namespace < :ns_hi"
EXPORT_RECORDS = f"""
SELECT {RECORD_COLUMNS}, CASE WHEN :vectors THEN embedding END AS embedding
FROM memory_records WHERE record_id > :after AND {_PLUS_NS}
ORDER BY record_id LIMIT :limit
"""
EXPORT_TURNS = f"""
SELECT * FROM turns WHERE turn_id > :after AND {_PLUS_NS} ORDER BY turn_id LIMIT :limit
"""
# OR IGNORE: a row whose id exists is kept as it is (import is idempotent).
IMPORT_RECORD = INSERT_RECORD.replace("INSERT INTO", "INSERT OR IGNORE INTO", 1)
# An open turn whose session already has another open turn here arrives closed (at its
# last event): a session has one open turn, and its events must not be left turnless.
IMPORT_TURN = """
INSERT OR IGNORE INTO turns (turn_id, namespace, session_id, opened_at, last_event_at,
                             closed_at, extracted_at, record_ids)
SELECT :turn_id, :namespace, :session_id, :opened_at, :last_event_at,
       CASE WHEN :closed_at IS NULL AND EXISTS (
                SELECT 1 FROM turns WHERE namespace = :namespace AND session_id = :session_id
                   AND closed_at IS NULL AND turn_id <> :turn_id)
            THEN :last_event_at ELSE :closed_at END,
       :extracted_at, :record_ids
"""
IMPORT_EVENT = INSERT_EVENT.replace("INSERT INTO", "INSERT OR IGNORE INTO", 1)

# --- retention and size ---------------------------------------------------------------
TRIMMABLE_TURNS = """
SELECT turn_id FROM turns
WHERE extracted_at IS NOT NULL AND trimmed_at IS NULL AND extracted_at < ?
ORDER BY extracted_at, turn_id LIMIT ?
"""
# A trimmed body is a delete and a re-insert of the row under its rowid, not an UPDATE:
# SQLite merges the pages a DELETE leaves underfull, while an UPDATE that shrinks a row
# leaves its page mostly empty for good (new events append at the end of the table), so
# the file kept growing at ~70% of its pace without retention (bench/soak).
TRIM_DELETE_EVENT = """
DELETE FROM events WHERE event_id = :event_id AND turn_id = :turn_id
RETURNING rowid AS row_id, *
"""
TRIM_INSERT_EVENT = """
INSERT INTO events (rowid, event_id, parent_event_id, session_id, actor_id, namespace, kind,
                    body, valid_time, source, schema_version, transaction_time, turn_id)
VALUES (:row_id, :event_id, :parent_event_id, :session_id, :actor_id, :namespace, :kind,
        :body, :valid_time, :source, :schema_version, :transaction_time, :turn_id)
"""
MARK_TRIMMED = "UPDATE turns SET trimmed_at = :now WHERE turn_id = :turn_id"
EXPIRABLE_TURNS = """
SELECT turn_id FROM turns WHERE trimmed_at IS NOT NULL AND extracted_at < ?
ORDER BY extracted_at, turn_id LIMIT ?
"""
# Events first: their retrieval rows go with them (ON DELETE CASCADE).
EXPIRE_EVENTS = "DELETE FROM events WHERE turn_id IN (SELECT value FROM json_each(?))"
EXPIRE_TURNS = "DELETE FROM turns WHERE turn_id IN (SELECT value FROM json_each(?))"
DELETE_RETRIEVALS = "DELETE FROM retrievals WHERE created_at < ?"
FTS_TABLES = ("memory_fts", "memory_trgm")  # the full-text indexes merge and optimize
# Leaf pages one merge_indexes() step merges per index. Negative: merge across levels, so
# the old segments that hold a deleted record's entries are reached too.
FTS_MERGE_PAGES = -500
# Bytes per table, its indexes included (FTS5 shadow tables count as the index's).
TABLE_SIZES = """
SELECT CASE WHEN coalesce(m.tbl_name, d.name) LIKE 'memory\\_fts%' ESCAPE '\\'
            THEN 'memory_fts' ELSE coalesce(m.tbl_name, d.name) END AS tbl,
       sum(d.pgsize) AS bytes
FROM dbstat d LEFT JOIN sqlite_master m ON m.name = d.name
GROUP BY tbl ORDER BY bytes DESC
"""
EVENT_BYTES = """
SELECT namespace, count(*) AS n, sum(length(CAST(body AS BLOB))) AS bytes
FROM events GROUP BY namespace
"""
RECORD_BYTES = """
SELECT namespace, count(*) AS n,
       sum(length(CAST(title AS BLOB)) + length(CAST(summary AS BLOB))
           + length(CAST(facts AS BLOB)) + length(CAST(concepts AS BLOB))
           + length(CAST(files_touched AS BLOB)) + coalesce(length(embedding), 0)) AS bytes
FROM memory_records GROUP BY namespace
"""

_TOKEN_COLUMNS = """token_id, name, actor, project, read_only, created_at, expires_at,
  revoked_at, last_used_at"""
INSERT_TOKEN = f"""
INSERT INTO api_tokens ({_TOKEN_COLUMNS}, secret_sha256)
VALUES (:token_id, :name, :actor, :project, :read_only, :created_at, :expires_at,
        :revoked_at, :last_used_at, :secret_sha256)
"""
TOKEN_BY_HASH = f"SELECT {_TOKEN_COLUMNS} FROM api_tokens WHERE secret_sha256 = ?"
LIST_TOKENS = f"SELECT {_TOKEN_COLUMNS} FROM api_tokens ORDER BY created_at, token_id"
REVOKE_TOKEN = "UPDATE api_tokens SET revoked_at = ? WHERE token_id = ? AND revoked_at IS NULL"
TOUCH_TOKEN = "UPDATE api_tokens SET last_used_at = ? WHERE token_id = ?"
INSERT_AUDIT = """
INSERT INTO audit_log (at, who, action, namespace, targets, count)
VALUES (:at, :who, :action, :namespace, :targets, :count)
"""
LIST_AUDIT = """
SELECT id, at, who, action, namespace, targets, count FROM audit_log
ORDER BY id DESC LIMIT ?
"""
