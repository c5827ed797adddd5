"""The JSON body both backends store for a record's code anchors."""

from __future__ import annotations

from typing import Any

from wakemark.shared.storage.ports.anchors import CodeAnchors, FileAnchor


def to_body(anchors: CodeAnchors) -> dict[str, Any]:
    return {
        "root": anchors.root,
        "files": [[f.path, f.sha256, f.blob, f.mtime_ns, f.size] for f in anchors.files],
        "identifiers": list(anchors.identifiers),
        "hashed": anchors.hashed,
        "edited": list(anchors.edited),
    }


def from_body(record_id: str, namespace: str, body: dict[str, Any]) -> CodeAnchors:
    return CodeAnchors(
        record_id=record_id,
        namespace=namespace,
        root=body["root"],
        files=tuple(FileAnchor(*f) for f in body["files"]),  # older rows have 3 fields
        identifiers=tuple(body["identifiers"]),
        hashed=body["hashed"],
        edited=tuple(body.get("edited", ())),  # older rows have none
    )
