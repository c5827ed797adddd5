"""gunicorn entry point: ``gunicorn wakemark.services.api.wsgi:app``."""

from wakemark.services.api import create_app

app = create_app()
