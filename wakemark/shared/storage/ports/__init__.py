"""One port per storage concern: a Protocol of the methods, with its value types.

A port file names a concern; each backend implements it in the file of the same name
(``sqlite/<concern>.py``, ``postgres/<concern>.py``) and ``tests/storage/`` checks it in
``test_<concern>.py``. ``Storage`` (``wakemark.shared.storage.base``) composes them; a
consumer is typed with the ports it uses.

Namespaces: every ``namespace`` argument of a read method may be a full namespace
(``/actor/a/project/p/``) or an actor prefix (``/actor/a/``). Matching is an escaped
``LIKE prefix%`` (``%``, ``_`` and ``\\`` escaped) and the argument must end in ``/``,
so ``/actor/a/project/ab/`` never matches ``/actor/a/project/abc/``.
"""
