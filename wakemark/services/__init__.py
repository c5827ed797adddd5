"""wakemark's running services: thin wiring of ``shared`` to the outside world."""
