"""gunicorn entry point: ``gunicorn services.api.wsgi:app``."""

from services.api import create_app

app = create_app()
