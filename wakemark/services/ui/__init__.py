"""The viewer: static pages at ``/ui`` (``pages``) and the JSON routes they need (``routes``)."""
