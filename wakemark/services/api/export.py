"""``GET /v1/export``: the ``wakemark export`` file, streamed (docs/data.md, "Export format")."""

from __future__ import annotations

import logging
from collections.abc import Iterator

from flask import Blueprint, Response, stream_with_context

from wakemark.services.api import current
from wakemark.services.api.params import query
from wakemark.services.api.schemas import ExportQuery
from wakemark.shared.transfer import export_lines

bp = Blueprint("export", __name__)
log = logging.getLogger(__name__)


@bp.get("/v1/export")
def export() -> Response:
    args = query(ExportQuery)  # no namespace: every one, as `wakemark export --all`
    namespace = args.namespace
    stream = export_lines(current.runtime().storage, namespace, args.events, args.vectors)
    # The header line is read here, before the response starts, so a database that is
    # down is a 503 like on any other route, not an empty 200.
    first = next(stream)

    def lines() -> Iterator[bytes]:
        yield first
        try:
            yield from stream
        except Exception:
            # The 200 is already sent: the missing end trailer tells the client.
            log.exception("export of %s failed mid-stream", namespace or "every namespace")

    return Response(
        stream_with_context(lines()),
        mimetype="application/x-ndjson",
        headers={"Content-Disposition": 'attachment; filename="wakemark-export.jsonl"'},
    )
