-- The staged vectors inline, as the records' own (0001): a rebuild's swap renames the
-- staged column into the searched one (wakemark.shared.storage.postgres.vectors), and a
-- vector moved out of line (TOAST, this type's default storage once a row holds two
-- vectors) would stay there, read from the TOAST table by every search that reads it.
ALTER TABLE memory_records ALTER COLUMN embedding_staged SET STORAGE PLAIN;
-- The storage applies to values written from now on: the staged vectors of a rebuild
-- under way (written out of line) are dropped, and it stages them again when run again.
UPDATE memory_records SET embedding_staged = NULL WHERE embedding_staged IS NOT NULL;
