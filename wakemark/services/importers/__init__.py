"""Importers from other tools' files: each yields wakemark events or records, which the
caller stores the usual way (events through ``put_events``, so turns and extraction run
as for live hooks)."""
