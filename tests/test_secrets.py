"""Credential scanning at capture: known formats are redacted, ordinary text is not.

Every credential here is built from its format with random characters at run time:
none is a real key, and none sits in this file as a literal a scanner would flag.
"""

from __future__ import annotations

import hashlib
import random
import string
import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wakemark.shared import secrets
from wakemark.shared.models import new_ulid
from wakemark.shared.privacy import _scrub_tags, _walk, scrub, scrub_text

ALNUM = string.ascii_letters + string.digits
UPPER = string.ascii_uppercase + string.digits
_rng = random.Random(16)


def rnd(n: int, alphabet: str = ALNUM) -> str:
    return "".join(_rng.choice(alphabet) for _ in range(n))


def _b64url(raw: str) -> str:
    import base64

    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def credentials() -> list[tuple[str, str, str]]:
    """(kind, the secret, a line of text holding it as an agent would see it)."""
    aws_id = "AKIA" + rnd(16, UPPER)
    aws_secret = rnd(40, ALNUM + "/+")
    ghp = "ghp_" + rnd(36)
    fine = "github_pat_" + rnd(82, ALNUM + "_")
    glpat = "glpat-" + rnd(20)
    slack = f"xoxb-{rnd(12, string.digits)}-{rnd(13, string.digits)}-{rnd(24).lower()}"
    stripe = "sk_" + "live_" + rnd(24)
    jwt = ".".join(
        [_b64url('{"alg":"HS256","typ":"JWT"}'), _b64url('{"sub":"1234567890"}'), rnd(43)]
    )
    key_body = "\n".join(rnd(64, ALNUM + "+/") for _ in range(4))
    pem = f"-----BEGIN RSA PRIVATE KEY-----\n{key_body}\n-----END RSA PRIVATE KEY-----"
    openssh = f"-----BEGIN OPENSSH PRIVATE KEY-----\n{key_body}\n-----END OPENSSH PRIVATE KEY-----"
    password = rnd(18) + "!"
    db_pw = rnd(14)
    env_token = rnd(32)
    bearer = rnd(40, ALNUM + "-_")
    sendgrid = f"SG.{rnd(22)}.{rnd(43)}"
    return [
        ("aws-access-key", aws_id, f"export AWS_ACCESS_KEY_ID={aws_id}"),
        ("aws-access-key", aws_secret, f'aws_secret_access_key = "{aws_secret}"'),
        ("github-token", ghp, f"git remote set-url origin https://{ghp}@github.com/a/b"),
        ("github-token", fine, f"GH_TOKEN={fine} gh pr list"),
        ("gitlab-token", glpat, f"curl --header 'PRIVATE-TOKEN: {glpat}' https://gitlab.com"),
        ("slack-token", slack, f"SLACK_BOT={slack}"),
        ("stripe-access-key", stripe, f"stripe.api_key = '{stripe}'"),
        ("json-web-token", jwt, f"cookie: session={jwt}; Path=/"),
        ("private-key", pem, f"$ cat id_rsa\n{pem}\n$ ls"),
        ("private-key", openssh, openssh[:120]),  # a truncated tool output
        ("secret-assignment", password, f"DB_PASSWORD={password}"),
        ("secret-assignment", db_pw, f'config = {{"password": "{db_pw}"}}'),
        ("secret-assignment", env_token, f"SERVICE_TOKEN={env_token}"),
        ("bearer-token", bearer, f"curl -H 'Authorization: Bearer {bearer}' localhost"),
        ("basic-auth-credentials", db_pw, f"postgres://app:{db_pw}@db:5432/prod"),
        ("sendgrid-api-key", sendgrid, f"SENDGRID={sendgrid}"),
    ]


CREDENTIALS = credentials()


@pytest.mark.parametrize(("kind", "secret", "line"), CREDENTIALS, ids=[c[0] for c in CREDENTIALS])
def test_credential_is_redacted_with_its_kind(kind: str, secret: str, line: str) -> None:
    out = scrub_text(line)
    probe = secret if kind != "private-key" else secret.splitlines()[1][:40]
    assert probe not in out
    assert f"[REDACTED:{kind}]" in out


def test_text_around_a_secret_is_kept() -> None:
    pem = next(c[1] for c in CREDENTIALS if c[0] == "private-key")
    assert scrub_text(f"$ cat id_rsa\n{pem}\n$ ls") == "$ cat id_rsa\n[REDACTED:private-key]\n$ ls"
    pw = "Zq8" + rnd(12)
    assert (
        scrub_text(f"DB_PASSWORD={pw} # local")
        == "DB_PASSWORD=[REDACTED:secret-assignment] # local"
    )


def _sha1() -> str:
    return hashlib.sha1(uuid.uuid4().bytes).hexdigest()


ORDINARY = [
    f"commit {_sha1()}\nAuthor: A <a@example.org>",
    f"git checkout {_sha1()[:12]} && git log {_sha1()}..HEAD",
    "sha256:" + hashlib.sha256(b"x").hexdigest(),
    f"pip download wheel --hash=sha256:{hashlib.sha256(b'y').hexdigest()}",
    f"request id {uuid.uuid4()} failed",
    f"event {new_ulid()} stored in turn {new_ulid()}",
    "token = tokens[0]",
    "self.api_key = api_key",
    "password = os.environ['DB_PASSWORD']",
    "secret_key = settings.SECRET_KEY",
    'token: "${{ secrets.GITHUB_TOKEN }}"',
    "api_key = get_api_key()",
    "max_tokens: 4096",
    "tokenizer = AutoTokenizer.from_pretrained('bert-base-uncased')",
    'PASSWORD="changeme"',
    "AWS_SECRET_ACCESS_KEY=<your-secret-key>",
    "def check_password(password: str) -> bool:",
    "ERROR auth: token expired for user alice (HTTP 401)",
    "DATABASE_URL=postgresql://localhost:5432/app",
    "PORT=8080\nNODE_ENV=production\nLOG_LEVEL=debug",
    "see https://example.org/docs/auth#tokens",
    "2026-12-01T11:42:50Z INFO worker: 84 passed in 3.21s",
    "[REDACTED:github-token]",
    # A variable named for the secret it holds, digits and all (our SQLite backend's line).
    '{"token_id": token_id, "secret_sha256": secret_sha256}',
    "client = Client(api_key=api_key2)",
    "headers = {token: accessToken2}",
]


# Ids by position: some texts hold fresh random ids, and every xdist worker must collect
# the same test names.
@pytest.mark.parametrize("text", ORDINARY, ids=[f"ordinary-{i}" for i in range(len(ORDINARY))])
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert scrub_text(text) == text


@pytest.mark.parametrize("prefix", ["A3TY", "ACCA", "A3T7"])
def test_an_id_holding_an_access_key_prefix_is_not_a_key(prefix: str) -> None:
    # A ULID (Crockford base32) holds ``A3T…`` or ``ACCA…`` followed by 16 more of the
    # key's characters often enough that a client's event id met it (a 422 on ingest).
    event_id = "V" + prefix + "HG503XH3WFDHX7N749V2"
    assert scrub({"event_id": event_id, "parent_event_id": event_id}) == {
        "event_id": event_id,
        "parent_event_id": event_id,
    }


def test_a_value_is_a_variable_only_when_it_names_the_same_secret() -> None:
    # Digits, case and underscores as a weak password or a random value has them.
    weak = "My" + "Secret" + "123"
    assert secrets.find(f"DB_PASSWORD={weak}")  # names another secret than the key's
    assert secrets.find(f"DB_PASSWORD=password_{rnd(6, string.digits)}")  # one word
    random_value = "Pw" + "dK" + "e7Lo" + rnd(8)  # words a random value happens to hold
    assert secrets.find(f"SERVICE_TOKEN={random_value}")
    one_letter = f"Xk9_{rnd(1, string.ascii_lowercase)}Token2"
    assert secrets.find(f"token = {one_letter}")


def test_every_kind_is_named_in_the_kinds_list() -> None:
    assert {kind for kind, _, _ in CREDENTIALS} <= set(secrets.kinds())


@given(st.text(max_size=200))
def test_redaction_is_idempotent(text: str) -> None:
    once = scrub_text(text)
    assert scrub_text(once) == once


# --- nesting: the joined pre-scan must never miss what a string-by-string scan finds ------

LEAF_SECRETS = [line for _, _, line in CREDENTIALS]
FILLER = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=10)


@st.composite
def holding(draw: Any) -> str:
    return draw(FILLER) + " " + draw(st.sampled_from(LEAF_SECRETS)) + " " + draw(FILLER)


def nested(leaf: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(
        leaf,
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.dictionaries(st.one_of(FILLER, holding()), inner, max_size=3)
        ),
        max_leaves=8,
    )


@given(nested(st.one_of(holding(), FILLER, st.integers(), st.none())))
def test_scrub_of_nested_values_equals_string_by_string(value: Any) -> None:
    assert scrub(value) == _walk(value, lambda s: secrets.redact(_scrub_tags(s)))


@given(nested(holding()))
def test_no_credential_survives_any_nesting(value: Any) -> None:
    out = repr(scrub(value))
    for _, secret, _ in CREDENTIALS:
        assert secret not in out


# --- rewritten upstream rules ----------------------------------------------------------


def test_every_rewrite_replaces_a_rule_the_installed_detect_secrets_has() -> None:
    # A rewrite whose upstream text changed would silently stop applying; the new text
    # then runs as it is (and the regex budget test baits it).
    from detect_secrets.plugins.base import RegexBasedDetector

    def detectors(cls: type) -> list[type]:
        return [cls, *(d for sub in cls.__subclasses__() for d in detectors(sub))]

    upstream = {
        p.pattern
        for cls in detectors(RegexBasedDetector)
        for p in (cls.denylist if isinstance(cls.denylist, list | tuple) else [])
    }
    assert set(secrets._REWRITES) <= upstream
    running = {p.pattern for _, p in secrets.RULES}
    assert not set(secrets._REWRITES) & running
    assert set(secrets._REWRITES.values()) <= running


@pytest.mark.parametrize(
    ("kind", "secret", "line"),
    [
        ("openai-token", "sk-proj-" + rnd(20) + "T3BlbkFJ" + rnd(20), 'OPENAI_API_KEY="{}"'),
        ("npm-tokens", "npm_" + rnd(36), "//registry.npmjs.org/:_authToken={}"),
        ("aws-access-key", rnd(40), "aws_secret_key = '{}'"),
        ("json-web-token", ".".join([_b64url('{"alg":"none"}'), "e30", rnd(43)]), "jwt={}"),
        ("aws-access-key", "A3TY" + rnd(16, UPPER), "AWS_ACCESS_KEY_ID={}"),
        ("aws-access-key", "ASIA" + rnd(16, UPPER), 'aws: ["{}", 1]'),
    ],
)
def test_rewritten_rules_catch_what_they_caught(kind: str, secret: str, line: str) -> None:
    out = scrub_text(line.format(secret))
    assert secret not in out and f"[REDACTED:{kind}]" in out


# --- secrets as JSON values ------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    ["password", "PASSWORD", "passwd", "db_password2", "apiKey", "api_key", "X-Api-Key",
     "API-KEY", "APIKey", "client_secret", "AWS_SECRET_ACCESS_KEY", "privateKey",
     "Authorization", "Cookie", "set-cookie", "access_token", "Password", "API key"],
)  # fmt: skip
def test_a_key_naming_a_secret_hides_its_string_value(key: str) -> None:
    value = "hunter2"  # short and plain: only the key says it is a secret
    assert scrub({"tool_input": {key: value, "host": "db"}}) == {
        "tool_input": {key: "[REDACTED:secret-assignment]", "host": "db"}
    }


@pytest.mark.parametrize(
    "key",
    ["max_tokens", "token_count", "tokenizer", "pageToken", "next_page_token", "key",
     "session_id", "private_key_id", "password_file", "author", "secretary notes",
     "DB_PASSWORD=x", "the password is"],
)  # fmt: skip
def test_a_key_that_does_not_name_a_secret_keeps_its_value(key: str) -> None:
    assert scrub({key: "hunter2"}) == {key: "hunter2"}


@pytest.mark.parametrize(
    "value",
    ["", "   ", "***", "xxx", "********", "<your-token>", "<PASSWORD>", "${DB_PASSWORD}",
     "$API_KEY", "{{ secrets.TOKEN }}", "%APPDATA%", "changeme", "your_api_key_here",
     "example-token", "null", "None", "[REDACTED:github-token]"],
)  # fmt: skip
def test_a_placeholder_under_a_secret_key_is_kept(value: str) -> None:
    assert scrub({"password": value}) == {"password": value}


def test_a_name_value_pair_naming_a_secret_hides_the_value() -> None:
    # Playwright MCP's browser_fill_form, and HTTP headers as a list of pairs.
    fields = [
        {"name": "Email", "type": "textbox", "ref": "e1", "value": "dev@shop.test"},
        {"name": "Password", "type": "textbox", "ref": "e2", "value": "hunter2"},
        {"key": "X-Api-Key", "value": "k3y"},
        {"name": "Confirm", "value": "${PW}"},
    ]
    assert [f["value"] for f in scrub({"fields": fields})["fields"]] == [
        "dev@shop.test", "[REDACTED:secret-assignment]", "[REDACTED:secret-assignment]",
        "${PW}",
    ]  # fmt: skip


def test_only_string_values_are_hidden_and_nested_ones_are_walked() -> None:
    value = {"token": {"access_token": "abc", "expires_in": 3600}, "password": 1234}
    assert scrub(value) == {
        "token": {"access_token": "[REDACTED:secret-assignment]", "expires_in": 3600},
        "password": 1234,
    }


def test_strings_scanned_together_get_exactly_their_own_spans() -> None:
    # Joined by a newline, the first key's match takes the newline the second needs before
    # it (``(?:\s|...)AKC``): the rule that found one rereads each string alone.
    first, second = "AKC" + rnd(12), "AKC" + rnd(12)
    putty = "PuTTY-User-Key-" + "File-2: ssh-rsa"  # an open key block
    texts = [f"x {first}", second, putty, "after"]
    assert secrets.redact_each(texts) == [secrets.redact(t) for t in texts]
    assert first not in repr(secrets.redact_each(texts)) and second not in repr(
        secrets.redact_each(texts)
    )
    assert secrets.redact_each(texts)[3] == "after"  # the open key block ends with its string


def test_long_keys_are_not_names_and_are_not_cached() -> None:
    # The key-name cache must not hold what clients send in bulk.
    before = secrets._names_secret.cache_info().currsize
    keys = {f"{'k' * 100}{i}_password": "hunter2" for i in range(200)}
    assert scrub(keys) == keys
    assert secrets._names_secret.cache_info().currsize == before
