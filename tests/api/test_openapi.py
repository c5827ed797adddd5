"""The OpenAPI document: complete, served, and the route table docs/api.md shows.

tests/test_docs.py checks that docs/api.md holds the table `make docs` writes."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from wakemark.services.api import create_app, openapi, schemas
from wakemark.services.api.openapi import ROUTES, build_spec, route_table
from wakemark.shared.config import Settings

from .conftest import Api

ROOT = Path(__file__).resolve().parents[2]
_CONVERTER = re.compile(r"<(?:[^<>:]+:)?([^<>]+)>")


def _flask_operations(tmp_path: Path) -> set[tuple[str, str]]:
    app = create_app(Settings(home=tmp_path / "home", embedder="off"))
    found = set()
    for rule in app.url_map.iter_rules():
        if rule.endpoint == "static":
            continue
        path = _CONVERTER.sub(r"{\1}", rule.rule)
        found |= {(m, path) for m in rule.methods or () if m not in ("HEAD", "OPTIONS")}
    return found


def _spec_operations(spec: dict[str, Any]) -> set[tuple[str, str]]:
    return {(m.upper(), path) for path, item in spec["paths"].items() for m in item}


def test_every_flask_route_is_declared_and_every_declaration_is_a_route(tmp_path: Path) -> None:
    flask_ops = _flask_operations(tmp_path)
    assert ("GET", "/v1/memories/{record_id}") in flask_ops
    assert _spec_operations(build_spec()) == flask_ops


def test_a_route_without_a_declaration_is_caught(tmp_path: Path) -> None:
    # The check above must be able to fail: a view added without a declaration.
    app = create_app(Settings(home=tmp_path / "home", embedder="off"))
    app.add_url_rule("/v1/new", "new", lambda: "", methods=["GET"])
    flask_ops = {(m, r.rule) for r in app.url_map.iter_rules() for m in r.methods or ()}
    assert ("GET", "/v1/new") in flask_ops - _spec_operations(build_spec())


def _properties(spec: dict[str, Any], name: str) -> set[str]:
    return set(spec["components"]["schemas"][name]["properties"])


def test_every_model_field_is_in_the_spec() -> None:
    spec = build_spec()
    models: set[type[BaseModel]] = set()
    for route in ROUTES:
        kinds = [route.body, *route.responses.values()]
        for kind in kinds:
            for arg in getattr(kind, "__args__", (kind,)):  # unions and list[...]
                if isinstance(arg, type) and issubclass(arg, BaseModel):
                    models.add(arg)
    assert {"NewMemory", "Event", "EventBatch", "MemoryRecord"} <= {m.__name__ for m in models}
    for model in models:
        names = {field.alias or name for name, field in model.model_fields.items()}
        assert names <= _properties(spec, model.__name__), model.__name__


def test_every_query_field_is_a_parameter_with_a_description() -> None:
    spec = build_spec()
    for route in ROUTES:
        op = spec["paths"][route.path][route.method.lower()]
        documented = {p["name"]: p for p in op.get("parameters", []) if p["in"] == "query"}
        fields = set(route.query.model_fields) if route.query else set()
        assert set(documented) == fields, route.rule
        assert all(p["description"] for p in documented.values()), route.rule


def test_every_query_model_in_schemas_is_declared_on_a_route() -> None:
    declared = {route.query for route in ROUTES if route.query}
    defined = {
        v
        for v in vars(schemas).values()
        if isinstance(v, type) and issubclass(v, schemas.Query) and v is not schemas.Query
    }
    assert defined == declared


def test_views_read_the_query_string_only_through_a_model() -> None:
    # A view reading request.args directly would take a parameter the spec does not name.
    for path in (ROOT / "services" / "api").rglob("*.py"):
        uses = re.findall(r"request\.args\s*[.\[]", path.read_text())
        assert not uses or path.name == "params.py", path


def test_the_spec_uses_json_schema_keywords_only() -> None:
    # pydantic writes a union member's bounds as "ge"/"le", which no validator reads.
    def walk(node: Any) -> None:
        if isinstance(node, dict):
            assert not {"ge", "le", "gt", "lt"} & set(node), node
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    spec = build_spec()
    walk(spec)
    assert spec["openapi"] == "3.1.0"


def test_spec_is_served_public(sqlite_api: Api) -> None:
    res = sqlite_api.get("/openapi.json", token=None)
    assert res.status_code == 200 and res.mimetype == "application/json"
    assert res.json == build_spec()
    assert res.json["paths"]["/openapi.json"]["get"]["security"] == []
    assert res.json["paths"]["/v1/stats"]["get"].get("security") is None  # the global bearer
    # Public does not mean reachable from any Host: DNS rebinding is still refused.
    foreign = sqlite_api.get("/openapi.json", token=None, headers={"Host": "evil.example"})
    assert foreign.status_code == 403


def test_route_table_changes_with_the_spec() -> None:
    spec = build_spec()
    changed = {**spec, "paths": {**spec["paths"]}}
    del changed["paths"]["/v1/projects"]
    assert "`GET /v1/projects`" in route_table(spec)
    assert "`GET /v1/projects`" not in route_table(changed)


def test_cli_prints_the_document_and_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert openapi.main([]) == 0
    assert '"openapi": "3.1.0"' in capsys.readouterr().out
    assert openapi.main(["--table"]) == 0
    assert capsys.readouterr().out == route_table(build_spec())
