"""Every SQL statement of the Postgres backend, as named constants with bound parameters."""

from __future__ import annotations

# Namespace arguments are LIKE patterns built by ``lexical.namespace_pattern`` (``%`` = all).
NS = "LIKE %(ns)s ESCAPE '\\'"

# --- events and turns -------------------------------------------------------------------
EVENT_COLUMNS = (
    "event_id, parent_event_id, session_id, actor_id, namespace, kind, body, valid_time,"
    " source_surface, source_version, project_path, schema_version, transaction_time, turn_id"
)

# Serializes turn bookkeeping per session across processes (key: namespace + session).
LOCK_SESSION = "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))"

# Serializes transactions that add or remove memory records (PostgresTx). The two-int
# key space never overlaps LOCK_SESSION's bigint one.
LOCK_RECORDS = "SELECT pg_advisory_xact_lock(1701734258, 1)"

# One statement for a whole batch, a column array each (in EVENT_COLUMNS order): the
# count trigger of migration 0013 then runs once per batch, not once per event, and
# takes the count rows of a batch spanning projects in namespace order (no deadlock).
EVENT_COLUMN_TYPES = (
    "text", "text", "text", "text", "text", "text", "text", "timestamptz", "text", "text",
    "text", "int", "timestamptz", "text",
)  # fmt: skip
INSERT_EVENTS = f"""
INSERT INTO events ({EVENT_COLUMNS})
SELECT * FROM unnest({", ".join(f"%s::{t}[]" for t in EVENT_COLUMN_TYPES)})
ON CONFLICT (event_id) DO NOTHING
"""

EVENTS_TURNS = "SELECT event_id, turn_id, namespace FROM events WHERE event_id = ANY(%s)"

# FOR UPDATE: an idle sweep closing this turn waits for us, then re-checks last_event_at.
OPEN_TURN = """
SELECT turn_id FROM turns
 WHERE namespace = %s AND session_id = %s AND closed_at IS NULL
   FOR UPDATE
"""

INSERT_TURN = """
INSERT INTO turns (turn_id, namespace, session_id, opened_at, last_event_at, closed_at)
VALUES (%(turn_id)s, %(namespace)s, %(session_id)s, %(now)s, %(now)s, %(closed_at)s)
"""

TOUCH_TURN = "UPDATE turns SET last_event_at = %s WHERE turn_id = %s"

CLOSE_TURN = "UPDATE turns SET closed_at = %s WHERE turn_id = %s AND closed_at IS NULL"

GET_EVENT = f"SELECT {EVENT_COLUMNS} FROM events WHERE event_id = %s"
EVENTS_AFTER = f"SELECT {EVENT_COLUMNS} FROM events WHERE event_id > %s ORDER BY event_id LIMIT %s"
REWRITE_EVENT = """
UPDATE events SET body = %s, source_surface = %s, source_version = %s, project_path = %s,
    actor_id = %s
WHERE event_id = %s
"""
# rename_session: the statements in order, all with %(namespace)s, %(old)s, %(new)s.
RENAME_SESSION = (
    """UPDATE turns SET closed_at = last_event_at
    WHERE namespace = %(namespace)s AND session_id = %(old)s AND closed_at IS NULL
      AND EXISTS (SELECT 1 FROM turns WHERE namespace = %(namespace)s
                  AND session_id = %(new)s AND closed_at IS NULL)""",
    "UPDATE turns SET session_id = %(new)s WHERE namespace = %(namespace)s"
    " AND session_id = %(old)s",
    "UPDATE retrievals SET session_id = %(new)s WHERE namespace = %(namespace)s"
    " AND session_id = %(old)s",
    "UPDATE events SET session_id = %(new)s WHERE namespace = %(namespace)s"
    " AND session_id = %(old)s",
)

# Keyed by "one full namespace": then the order comes straight off
# events_namespace_recent (a LIKE would sort every event of the namespace first).
LIST_EVENTS = {
    exact: f"""
SELECT {EVENT_COLUMNS} FROM events
 WHERE {"namespace = %(exact)s" if exact else "namespace " + NS}
   AND (%(session_id)s::text IS NULL OR session_id = %(session_id)s)
 ORDER BY transaction_time DESC, event_id DESC
 LIMIT %(limit)s
"""
    for exact in (False, True)
}

INSERT_RETRIEVAL = """
INSERT INTO retrievals (retrieval_id, event_id, namespace, session_id, created_at, body)
VALUES (%(retrieval_id)s, %(event_id)s, %(namespace)s, %(session_id)s, %(created_at)s,
        %(body)s::jsonb)
"""
RETRIEVAL_COLUMNS = "retrieval_id, event_id, namespace, session_id, created_at, body"
GET_RETRIEVAL = f"SELECT {RETRIEVAL_COLUMNS} FROM retrievals WHERE retrieval_id = %s"
# Keyed (one session, after a page key): a session's rows come off retrievals_by_session.
LIST_RETRIEVALS = {
    (session, keyset): f"""
SELECT {RETRIEVAL_COLUMNS} FROM retrievals
 WHERE namespace {NS} {"AND session_id = %(session_id)s" if session else ""}
 {"AND (created_at, retrieval_id) < (%(after_at)s, %(after_id)s)" if keyset else ""}
 ORDER BY created_at DESC, retrieval_id DESC
 LIMIT %(limit)s
"""
    for session in (False, True)
    for keyset in (False, True)
}

RETRIEVAL_SESSION_COLUMNS = """namespace, session_id, prompts, injected, records, bytes,
  latency_ms, first_at, last_at"""
RETRIEVAL_SESSIONS = {
    keyset: f"""
SELECT {RETRIEVAL_SESSION_COLUMNS} FROM retrieval_sessions WHERE namespace = %(namespace)s
 {"AND (last_at, session_id) < (%(after_at)s, %(after_id)s)" if keyset else ""}
 ORDER BY last_at DESC, session_id DESC
 LIMIT %(limit)s
"""
    for keyset in (False, True)
}

RETRIEVAL_TOTALS = f"""
SELECT coalesce(sum(prompts), 0)::bigint, coalesce(sum(injected), 0)::bigint,
       coalesce(sum(records), 0)::bigint, coalesce(sum(bytes), 0)::bigint,
       coalesce(sum(latency_ms), 0.0)
  FROM retrieval_sessions WHERE namespace {NS}
"""

GET_TURNS = """
SELECT turn_id, namespace, session_id, closed_at IS NOT NULL, extracted_at IS NOT NULL
  FROM turns WHERE turn_id = ANY(%s)
"""

TURNS_EVENTS = f"""
SELECT {EVENT_COLUMNS} FROM events WHERE turn_id = ANY(%s) ORDER BY turn_id, valid_time, event_id
"""

SESSION_TURNS = """
SELECT turn_id, opened_at, closed_at IS NOT NULL, extracted_at IS NOT NULL, record_ids,
       skip_reason
  FROM turns WHERE namespace = %s AND session_id = %s ORDER BY opened_at, turn_id LIMIT %s
"""

COUNT_EVENTS = "SELECT count(*) FROM events WHERE event_id = ANY(%s::text[])"

DELETE_EVENTS = "DELETE FROM events WHERE event_id = ANY(%s::text[])"

CLOSE_IDLE_TURNS = """
UPDATE turns SET closed_at = %(now)s
 WHERE closed_at IS NULL AND last_event_at < %(idle_before)s
RETURNING turn_id
"""

PENDING_TURNS = """
SELECT turn_id FROM turns
 WHERE closed_at IS NOT NULL AND extracted_at IS NULL
 ORDER BY opened_at, turn_id
 LIMIT %s
"""

MARK_TURN_EXTRACTED = """
UPDATE turns SET extracted_at = %s, record_ids = %s, skip_reason = %s
 WHERE turn_id = %s AND extracted_at IS NULL
RETURNING turn_id
"""

# --- memory records -----------------------------------------------------------------------
_WRITTEN_COLUMNS = (
    "record_id, namespace, title, summary, facts, concepts, files_touched, observation_type,"
    " source_event_ids, strategy, quality, pinned, created_at"
)
RECORD_COLUMNS = _WRITTEN_COLUMNS + ", edited_at"

# No edited_at: a record is written unedited; only EDIT_RECORD sets it.
INSERT_RECORD = f"""
INSERT INTO memory_records ({_WRITTEN_COLUMNS})
VALUES (%(record_id)s, %(namespace)s, %(title)s, %(summary)s, %(facts)s, %(concepts)s,
        %(files_touched)s, %(observation_type)s, %(source_event_ids)s, %(strategy)s,
        %(quality)s, %(pinned)s, %(created_at)s)
ON CONFLICT (record_id) DO NOTHING
RETURNING record_id
"""

REPLACE_RECORD_TEXT = """
UPDATE memory_records SET title = %(title)s, summary = %(summary)s, facts = %(facts)s,
       concepts = %(concepts)s, files_touched = %(files_touched)s, embedding = NULL
 WHERE record_id = %(record_id)s
RETURNING namespace
"""

PUT_EMBEDDING = """
UPDATE memory_records SET embedding = %s WHERE record_id = %s RETURNING namespace
"""

DELETE_RECORDS = """
DELETE FROM memory_records WHERE record_id = ANY(%s::text[]) RETURNING record_id, namespace
"""

GET_RECORD = f"SELECT {RECORD_COLUMNS} FROM memory_records WHERE record_id = %s"

GET_RECORDS = f"SELECT {RECORD_COLUMNS} FROM memory_records WHERE record_id = ANY(%s::text[])"

COUNT_RECORDS = f"""
SELECT coalesce(sum(memories), 0)::bigint FROM namespace_record_counts WHERE namespace {NS}
"""

# A page of records, keyed (pinned first, one full namespace, after a page key). For one
# namespace the order comes straight off memory_records_namespace_recent / _pinned_first
# (migration 0005) and a page key is a seek into it; a prefix spanning namespaces sorts
# what it matched.
_KEYS = {False: "created_at, record_id", True: "pinned, created_at, record_id"}
_AFTER = {
    False: "%(after_at)s, %(after_id)s",
    True: "%(after_pinned)s, %(after_at)s, %(after_id)s",
}
LIST_RECORDS = {
    (pinned, exact, keyset): f"""
SELECT {RECORD_COLUMNS} FROM memory_records
 WHERE {"namespace = %(exact)s" if exact else "namespace " + NS}
 {f"AND ({_KEYS[pinned]}) < ({_AFTER[pinned]})" if keyset else ""}
 ORDER BY {_KEYS[pinned].replace(",", " DESC,")} DESC
 LIMIT %(limit)s
"""
    for pinned in (False, True)
    for exact in (False, True)
    for keyset in (False, True)
}

SET_PINNED = f"""
UPDATE memory_records SET pinned = %s WHERE record_id = %s RETURNING {RECORD_COLUMNS}
"""

# A None field is left as it is; the trigger re-indexes the full-text entry.
EDIT_RECORD = f"""
UPDATE memory_records
   SET title = coalesce(%(title)s, title),
       summary = coalesce(%(summary)s, summary),
       facts = coalesce(%(facts)s::text[], facts),
       edited_at = %(now)s,
       embedding = NULL
 WHERE record_id = %(record_id)s
RETURNING {RECORD_COLUMNS}
"""

FIND_RECORDS = f"""
SELECT r.record_id FROM memory_records r
 WHERE r.namespace {NS}
   AND (%(type)s::text IS NULL OR r.observation_type = %(type)s)
   AND (%(before)s::timestamptz IS NULL OR r.created_at < %(before)s)
   AND (%(after)s::timestamptz IS NULL OR r.created_at >= %(after)s)
   AND (%(pinned)s::boolean IS NULL OR r.pinned = %(pinned)s)
   AND (%(session_id)s::text IS NULL OR EXISTS (
         SELECT 1 FROM events e
          WHERE e.event_id = ANY(r.source_event_ids) AND e.session_id = %(session_id)s))
 ORDER BY r.created_at, r.record_id
"""

TIMELINE_BEFORE = f"""
SELECT {RECORD_COLUMNS} FROM memory_records
 WHERE namespace = %(namespace)s AND (created_at, record_id) < (%(created_at)s, %(record_id)s)
 ORDER BY created_at DESC, record_id DESC
 LIMIT %(n)s
"""

TIMELINE_AFTER = f"""
SELECT {RECORD_COLUMNS} FROM memory_records
 WHERE namespace = %(namespace)s AND (created_at, record_id) > (%(created_at)s, %(record_id)s)
 ORDER BY created_at, record_id
 LIMIT %(n)s
"""

HAS_EMBEDDING = "SELECT embedding IS NOT NULL FROM memory_records WHERE record_id = %s"

# --- search ---------------------------------------------------------------------------------
# Per query token: its document frequency, via the lexemes Postgres makes of it (a token
# that is only stop words can never match, so it sorts as the most common and is dropped
# first); and the document count.
QUERY_TERMS = """
SELECT t.token,
       CASE WHEN count(l.lexeme) = 0 THEN 2147483647 ELSE min(coalesce(d.df, 0)) END,
       (SELECT n FROM fts_doc_count WHERE id = 1)
  FROM unnest(%s::text[]) AS t(token)
  LEFT JOIN LATERAL unnest(tsvector_to_array(to_tsvector('english', wakemark_fts_text(t.token))))
       AS l(lexeme) ON true
  LEFT JOIN lexeme_df d ON d.lexeme = l.lexeme
 GROUP BY t.token
"""

# The OR of the terms' plainto_tsquery (no operator in user text survives), in order;
# NULL when no term has one (all stop words).
TSQUERY = """
SELECT string_agg('(' || part || ')', ' | ' ORDER BY i)
  FROM (SELECT i, plainto_tsquery('english', wakemark_fts_text(t))::text AS part
          FROM unnest(%s::text[]) WITH ORDINALITY AS u(t, i)) p
 WHERE part <> ''
"""

# Ranks the newest %(window)s matches only (all of them when there are fewer), in
# memory_fts. Keyed by "one full namespace": then the statement says only namespace = ...,
# so the planner's row estimate holds (with the prefix LIKE beside it, it multiplied the
# two selectivities and expected 1/5 of a 200k namespace's matches, so it read and sorted
# all 30k matches of a mid-frequency term where walking 13k rows would do: 80 vs 15 ms).
# Common terms are walked newest first through memory_fts_namespace_recent, the walk
# stopping at the window; rarer ones come from memory_fts_namespace_tsv, which holds the
# namespace beside each lexeme, so the bitmap is the namespace's matches only. The rank is
# computed before the window's sort, which then holds no tsvector and stays small.
# ts_rank weights are {D, C, B, A}: title (A) counts most, facts (C) least. Only the
# ranked rows are read from memory_records.
SEARCH_FTS = {
    exact: f"""
SELECT {RECORD_COLUMNS} FROM memory_records JOIN (
  SELECT record_id, rank
    FROM (SELECT record_id, created_at,
                 ts_rank('{{0.1, 0.2, 0.4, 1.0}}', tsv, %(tsquery)s::tsquery) AS rank
            FROM memory_fts
           WHERE tsv @@ %(tsquery)s::tsquery
             AND {"namespace = %(exact)s" if exact else "namespace " + NS}
             AND (%(type)s::text IS NULL OR observation_type = %(type)s)
             AND (%(since)s::timestamptz IS NULL OR created_at >= %(since)s)
           ORDER BY created_at DESC, record_id DESC
           LIMIT %(window)s) recent
   ORDER BY rank DESC, created_at DESC, record_id
   LIMIT %(limit)s
) ranked USING (record_id)
 ORDER BY ranked.rank DESC, created_at DESC, record_id
"""
    for exact in (False, True)
}

# The namespace's newest rows holding any of the patterns. The equality on one project's
# namespace lets memory_records_namespace_recent hand them out in order (with the prefix
# alone the planner read and sorted the whole project: 0.5 s at 200k).
SEARCH_SUBSTRING = f"""
SELECT * FROM (
  SELECT {RECORD_COLUMNS} FROM memory_records
   WHERE namespace {NS} AND (%(exact)s::text IS NULL OR namespace = %(exact)s)
     AND (%(type)s::text IS NULL OR observation_type = %(type)s)
     AND (%(since)s::timestamptz IS NULL OR created_at >= %(since)s)
   ORDER BY created_at DESC, record_id DESC
   LIMIT %(scan)s) r
 WHERE title ILIKE ANY(%(patterns)s::text[])
    OR summary ILIKE ANY(%(patterns)s::text[])
    OR array_to_string(facts, ' ') ILIKE ANY(%(patterns)s::text[])
 ORDER BY created_at DESC, record_id DESC
 LIMIT %(limit)s
"""

# One fragment of three characters or more, through the trigram index of migration 0009
# (the expression must be the indexed one): the newest of its first %(candidates)s
# matches, which the index hands out without reading or sorting the rest.
SEARCH_TRIGRAM = f"""
SELECT * FROM (
  SELECT {RECORD_COLUMNS} FROM memory_records
   WHERE wakemark_trgm_text(title, summary, facts) ILIKE %(pattern)s ESCAPE '\\'
     AND namespace {NS}
     AND (%(type)s::text IS NULL OR observation_type = %(type)s)
     AND (%(since)s::timestamptz IS NULL OR created_at >= %(since)s)
   LIMIT %(candidates)s) r
 ORDER BY created_at DESC, record_id DESC
 LIMIT %(limit)s
"""

# Bounds the statements after it in the transaction (milliseconds; 0 would mean none).
STATEMENT_TIMEOUT = "SELECT set_config('statement_timeout', %s, true)"

# vector_send: the raw binary form, decoded in one numpy call for the whole namespace.
# No ORDER BY: sorting rows this wide spills to disk; the caller sorts the narrow keys.
REPEATABLE_READ = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"

# The watermark is the snapshot's xmin: every transaction below it had ended before the
# snapshot, so rows stamped (embedded_xid) below it were already visible. since = -1: all.
EMBEDDINGS_SNAPSHOT = f"""
SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint, count(*),
       count(*) FILTER (WHERE embedded_xid >= %(since)s)
  FROM memory_records WHERE namespace {NS} AND embedding IS NOT NULL
"""

# No ORDER BY: sorting the vectors would spill to disk; callers do not need an order.
LIST_EMBEDDINGS = f"""
SELECT record_id, extract(epoch FROM created_at)::float8, observation_type,
       vector_send(embedding)
  FROM memory_records
 WHERE namespace {NS} AND embedding IS NOT NULL AND embedded_xid >= %(since)s
"""

EMBEDDED_IDS = f"""
SELECT record_id FROM memory_records WHERE namespace {NS} AND embedding IS NOT NULL
"""

MISSING_EMBEDDING = f"""
SELECT {RECORD_COLUMNS} FROM memory_records
 WHERE embedding IS NULL AND namespace {NS}
 ORDER BY created_at, record_id
 LIMIT %(limit)s
"""

CLEAR_EMBEDDINGS = f"""
UPDATE memory_records SET embedding = NULL
 WHERE embedding IS NOT NULL AND namespace {NS}
RETURNING namespace
"""

# SET LOCAL, with parameters, for one vector search: the HNSW walk's candidate list, and
# sorting off for the walk, so the planner takes the index (the caller chose it by the
# namespace's size; for a selective filter the planner would rather sort every row that
# passes). JIT off: a disabled sort prices the plan past jit_above_cost, and compiling it
# took ~0.5 s, against ~10 ms for the walk.
SET_VECTOR_SEARCH = (
    "SELECT set_config('jit', 'off', true), set_config('hnsw.ef_search', %s, true),"
    " set_config('enable_sort', %s, true)"
)

COUNT_EMBEDDINGS = f"""
SELECT count(*) FROM memory_records WHERE namespace {NS} AND embedding IS NOT NULL
"""

_VECTOR_FILTER = f"""namespace {NS} AND embedding IS NOT NULL
   AND (%(type)s::text IS NULL OR observation_type = %(type)s)
   AND (%(since)s::timestamptz IS NULL OR created_at >= %(since)s)"""

# The HNSW graph, walked past ef_search candidates while the filter rejects them
# (hnsw.iterative_scan, SET LOCAL with ef_search by the caller). relaxed_order may hand
# rows back slightly out of order: the outer query sorts the few it kept.
SEARCH_VECTOR_HNSW = f"""
WITH nearest AS MATERIALIZED (
  SELECT record_id, created_at, embedding <=> %(vector)s AS distance FROM memory_records
   WHERE {_VECTOR_FILTER}
   ORDER BY embedding <=> %(vector)s
   LIMIT %(limit)s
)
SELECT record_id, extract(epoch FROM created_at)::float8, 1 - distance
  FROM nearest ORDER BY distance, record_id
"""

# Every row of the namespace scored (MATERIALIZED keeps the planner off the HNSW index):
# exact, and for a small namespace faster than a graph over every namespace's rows.
SEARCH_VECTOR_EXACT = f"""
WITH scored AS MATERIALIZED (
  SELECT record_id, created_at, embedding <=> %(vector)s AS distance FROM memory_records
   WHERE {_VECTOR_FILTER}
)
SELECT record_id, extract(epoch FROM created_at)::float8, 1 - distance
  FROM scored ORDER BY distance, record_id LIMIT %(limit)s
"""

VECTOR_COSINES = f"""
SELECT record_id, 1 - (embedding <=> %(vector)s) FROM memory_records
 WHERE record_id = ANY(%(ids)s) AND namespace {NS} AND embedding IS NOT NULL
"""

# --- stats ----------------------------------------------------------------------------------
_TURN_EVENTS = "SELECT count(*) FROM events e WHERE e.turn_id = t.turn_id"
# events, memories and embedded come from the counts the triggers of migration 0013 keep:
# one row per project, however many events and records it holds.
STATS = f"""
SELECT
  (SELECT coalesce(sum(events), 0)::bigint FROM namespace_event_counts WHERE namespace {NS}),
  (SELECT coalesce(sum(memories), 0)::bigint FROM namespace_record_counts WHERE namespace {NS}),
  (SELECT coalesce(sum(embedded), 0)::bigint FROM namespace_record_counts WHERE namespace {NS}),
  -- from the unextracted turns (closed ones, then open ones: two partial indexes) to
  -- their events, one index lookup per turn: costs what is pending, not what is stored
  -- (as a join the planner hashed every event of the database: 50 ms at 165k events)
  (SELECT coalesce(sum(({_TURN_EVENTS})), 0)::bigint FROM turns t
    WHERE t.closed_at IS NOT NULL AND t.extracted_at IS NULL AND t.namespace {NS})
  + (SELECT coalesce(sum(({_TURN_EVENTS})), 0)::bigint FROM turns t
    WHERE t.closed_at IS NULL AND t.namespace {NS}),
  (SELECT coalesce(sum(memories - embedded), 0)::bigint FROM namespace_record_counts
    WHERE namespace {NS})
"""

SKIPPED_TURNS = """
SELECT skip_reason, count(*) FROM turns WHERE skip_reason IS NOT NULL GROUP BY skip_reason
"""

PROJECTS = """
SELECT coalesce(e.namespace, r.namespace), e.project_path,
       coalesce(e.events, 0), coalesce(r.memories, 0),
       greatest(e.last_event_at, r.last_record_at)
  FROM (SELECT * FROM namespace_event_counts WHERE events > 0) e
  FULL JOIN (SELECT * FROM namespace_record_counts WHERE memories > 0) r
    ON r.namespace = e.namespace
 ORDER BY 5 DESC NULLS LAST, 1
"""

PING = "SELECT 1"

# --- export and import --------------------------------------------------------------------
# Keyset pages in id order (primary keys; ids are ULIDs, which sort the same in every
# collation), so each page is one index seek however far into the table it is.
EXPORT_RECORDS = f"""
SELECT {RECORD_COLUMNS}, CASE WHEN %(vectors)s THEN embedding END
  FROM memory_records
 WHERE record_id > %(after)s AND namespace {NS}
 ORDER BY record_id
 LIMIT %(limit)s
"""

EXPORT_TURNS = f"""
SELECT turn_id, namespace, session_id, opened_at, last_event_at, closed_at, extracted_at,
       record_ids
  FROM turns
 WHERE turn_id > %(after)s AND namespace {NS}
 ORDER BY turn_id
 LIMIT %(limit)s
"""

# With its vector in the same row: an insert then an UPDATE of the embedding would write
# every index (HNSW included) twice. The stamp is what migration 0003's trigger sets on
# an update, so a vector cache's incremental refresh sees imported vectors too.
IMPORT_RECORD = f"""
INSERT INTO memory_records ({RECORD_COLUMNS}, embedding, embedded_xid)
VALUES (%(record_id)s, %(namespace)s, %(title)s, %(summary)s, %(facts)s, %(concepts)s,
        %(files_touched)s, %(observation_type)s, %(source_event_ids)s, %(strategy)s,
        %(quality)s, %(pinned)s, %(created_at)s, %(edited_at)s, %(embedding)s::vector,
        CASE WHEN %(embedding)s::vector IS NULL THEN 0
             ELSE pg_current_xact_id()::text::bigint END)
ON CONFLICT (record_id) DO NOTHING
RETURNING record_id
"""

# An open turn whose session already has another open turn here arrives closed (at its
# last event): a session has one open turn, and its events must not be left turnless.
IMPORT_TURN = """
INSERT INTO turns (turn_id, namespace, session_id, opened_at, last_event_at, closed_at,
                   extracted_at, record_ids)
SELECT %(turn_id)s, %(namespace)s, %(session_id)s, %(opened_at)s, %(last_event_at)s,
       CASE WHEN %(closed_at)s::timestamptz IS NULL AND EXISTS (
                SELECT 1 FROM turns WHERE namespace = %(namespace)s
                   AND session_id = %(session_id)s AND closed_at IS NULL
                   AND turn_id <> %(turn_id)s)
            THEN %(last_event_at)s ELSE %(closed_at)s::timestamptz END,
       %(extracted_at)s, %(record_ids)s
ON CONFLICT (turn_id) DO NOTHING
"""

# --- retention and size ---------------------------------------------------------------------
TRIMMABLE_TURNS = """
SELECT turn_id FROM turns
 WHERE extracted_at IS NOT NULL AND trimmed_at IS NULL AND extracted_at < %s
 ORDER BY extracted_at, turn_id
 LIMIT %s
"""

TRIM_EVENT_BODY = "UPDATE events SET body = %s WHERE event_id = %s AND turn_id = %s"

MARK_TRIMMED = "UPDATE turns SET trimmed_at = %s WHERE turn_id = %s"

EXPIRABLE_TURNS = """
SELECT turn_id FROM turns WHERE trimmed_at IS NOT NULL AND extracted_at < %s
ORDER BY extracted_at, turn_id LIMIT %s
FOR UPDATE SKIP LOCKED
"""
# Events first (they reference their turn); their retrieval rows go with them (CASCADE).
EXPIRE_EVENTS = "DELETE FROM events WHERE turn_id = ANY(%s)"
EXPIRE_TURNS = "DELETE FROM turns WHERE turn_id = ANY(%s)"
DELETE_RETRIEVALS = "DELETE FROM retrievals WHERE created_at < %s"

# wakemark's tables in the schema it runs in (the first of search_path), with the roles
# allowed to vacuum them: the owner (or a member of its role) and superusers.
DATABASE_BYTES = """
SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c
 WHERE c.relkind = 'r' AND c.relnamespace = current_schema()::regnamespace
"""

TABLE_SIZES = """
SELECT c.relname, pg_total_relation_size(c.oid), pg_has_role(c.relowner, 'USAGE')
  FROM pg_class c
 WHERE c.relkind = 'r' AND c.relnamespace = current_schema()::regnamespace
 ORDER BY 2 DESC
"""

EVENT_BYTES = "SELECT namespace, count(*), sum(octet_length(body)) FROM events GROUP BY namespace"

RECORD_BYTES = """
SELECT namespace, count(*),
       sum(octet_length(title) + octet_length(summary)
           + octet_length(array_to_string(facts, '')) + octet_length(array_to_string(concepts, ''))
           + octet_length(array_to_string(files_touched, ''))
           + coalesce(vector_dims(embedding) * 4, 0))
  FROM memory_records GROUP BY namespace
"""

_TOKEN_COLUMNS = """token_id, name, actor, project, read_only, created_at, expires_at,
  revoked_at, last_used_at"""
INSERT_TOKEN = f"""
INSERT INTO api_tokens ({_TOKEN_COLUMNS}, secret_sha256)
VALUES (%(token_id)s, %(name)s, %(actor)s, %(project)s, %(read_only)s, %(created_at)s,
        %(expires_at)s, %(revoked_at)s, %(last_used_at)s, %(secret_sha256)s)
"""
TOKEN_BY_HASH = f"SELECT {_TOKEN_COLUMNS} FROM api_tokens WHERE secret_sha256 = %s"
LIST_TOKENS = f"SELECT {_TOKEN_COLUMNS} FROM api_tokens ORDER BY created_at, token_id"
REVOKE_TOKEN = """
UPDATE api_tokens SET revoked_at = %s WHERE token_id = %s AND revoked_at IS NULL
"""
TOUCH_TOKEN = "UPDATE api_tokens SET last_used_at = %s WHERE token_id = %s"
INSERT_AUDIT = """
INSERT INTO audit_log (at, who, action, namespace, targets, count)
VALUES (%(at)s, %(who)s, %(action)s, %(namespace)s, %(targets)s, %(count)s)
"""
LIST_AUDIT = """
SELECT id, at, who, action, namespace, targets, count FROM audit_log
ORDER BY id DESC LIMIT %s
"""
