"""schemathesis against the spec the app serves: every operation, positive and negative data.

Each response is checked against the spec (status documented, body matching its schema,
401 without the token or with a wrong one, 405 for undeclared methods, bad data refused,
good data taken); none may be a 5xx or take over ``REQUEST_BOUND_S``. Bounded for CI:
``MAX_EXAMPLES`` per operation (about a minute on 2 cores).
Alone: ``pytest -m fuzz tests/api/test_fuzz_schemathesis.py``.
"""

from __future__ import annotations

import secrets
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from wakemark.services.api import create_app
from wakemark.shared.config import Settings, prepare_home
from wakemark.shared.runtime import Runtime
from wakemark.shared.storage import migrate

from .fuzzing import REQUEST_BOUND_S, Tally

pytestmark = pytest.mark.fuzz

MAX_EXAMPLES = 25
HOST = {"Host": "127.0.0.1:37800"}  # the loopback Host the API insists on
TOKEN = secrets.token_urlsafe(32)
TALLY = Tally()

# schemathesis parametrizes while collecting, so the app (over a fresh SQLite home) must
# exist at import; the module fixture below removes it.
_HOME = tempfile.TemporaryDirectory(prefix="wakemark-st-")
_SETTINGS = Settings(home=Path(_HOME.name) / "home", embedder="off", token=TOKEN)
prepare_home(_SETTINGS)
migrate(_SETTINGS)
_RUNTIME = Runtime.build(_SETTINGS)
APP = create_app(runtime=_RUNTIME)
TALLY.wrap(APP)

schema = schemathesis.openapi.from_wsgi(
    "/openapi.json", APP, config=schemathesis.Config.from_dict({"headers": HOST}), headers=HOST
)


@schema.auth()
class Bearer:
    """An auth provider rather than a fixed header, so schemathesis knows the token is
    real and checks that requests without it, or with a wrong one, are refused."""

    def get(self, case: Any, ctx: Any) -> str:
        return TOKEN

    def set(self, case: Any, data: str, ctx: Any) -> None:
        case.headers = {**(case.headers or {}), "Authorization": f"Bearer {data}"}


@pytest.fixture(scope="module", autouse=True)
def _report(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    _RUNTIME.close()
    _HOME.cleanup()
    line = TALLY.report(request.config, "schemathesis")
    assert TALLY.requests > 0 and TALLY.server_errors == 0, line


@schema.parametrize()
@settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_api_conforms_to_its_openapi_spec(case: Any) -> None:
    TALLY.take_slow()  # a request of an earlier example, already failed on
    case.call_and_validate()
    slow = TALLY.take_slow()
    assert not slow, f"over {REQUEST_BOUND_S} s: {slow}"
