"""The HTTP API: ``create_app`` builds the Flask app; ``wsgi.py`` serves it."""

from __future__ import annotations

import importlib

from flask import Flask

from shared.config import Settings
from shared.runtime import Runtime

# Each module defines a Blueprint named ``bp``; add a line to register a new one.
BLUEPRINTS = (
    "services.api.health",
)


def create_app(settings: Settings | None = None, runtime: Runtime | None = None) -> Flask:
    runtime = runtime or Runtime.build(settings)
    app = Flask(__name__)
    app.extensions["engram"] = runtime
    for name in BLUEPRINTS:
        app.register_blueprint(importlib.import_module(name).bp)
    return app
