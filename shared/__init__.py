"""wakemark's domain: models, settings, storage, retrieval, jobs — shared by every service."""

__version__ = "0.1.0"
