"""Credential scanning at capture: known secret formats become ``[REDACTED:<kind>]``.

The formats are detect-secrets' (1.5) regex plugins, read from the installed package at
import, so the rule set is maintained upstream. We do not call its ``scan_line``: it
costs ~10x as much a line (settings, filters, code snippets; figures in
bench/results/secrets.md). Each regex runs through ``AnchoredPattern``, which skips text
lacking the literals every match holds, or a match of the pattern's tail from its first
literal (the Discord and Telegram rules, whose ``.`` and ``:`` every timestamp holds).
Left out on purpose: its entropy plugins (they flag every git SHA, sha256 and UUID), the
public-IP plugin (an address is not a credential), and its keyword plugin and the
``<vendor>_key = <value>`` forms of the IBM, Cloudant and SoftLayer plugins, which our
one ``secret-assignment`` rule covers: any name holding a keyword (detect-secrets' list
plus ``token``, ``auth``, ...) assigned a value that looks random rather than like code,
a reference or a placeholder.

Added here because detect-secrets' regexes stop short of them: the whole private-key
block (it matches the BEGIN line only), GitHub fine-grained tokens, the whole JWT (its
regex ends lazily; its own check lives in a verify step we do not run) and bearer tokens.
"""

from __future__ import annotations

import base64
import functools
import importlib
import inspect
import json
import math
import pkgutil
import re
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import detect_secrets.plugins
from detect_secrets.plugins.base import RegexBasedDetector
from detect_secrets.plugins.keyword import DENYLIST
from detect_secrets.plugins.private_key import PrivateKeyDetector

from wakemark.shared.anchored import AnchoredPattern

# Plugins whose regexes we do not take (see the module docstring).
_SKIPPED_PLUGINS = {"IPPublicDetector", "PrivateKeyDetector", "JwtTokenDetector"}
# How ``RegexBasedDetector.build_assignment_regex`` starts a ``<vendor>_key = <value>``
# rule (IBM, Cloudant, SoftLayer): our ``secret-assignment`` covers those lines, and each
# of these is tried at every position (the slowest rules of the set by far).
_ASSIGNMENT_RULE_PREFIX = r"(?:(?<=\W)|(?<=^))"


def _slug(secret_type: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", secret_type.lower()).strip("-")


# Upstream rules that backtrack on crafted text (a start at every ``//`` or ``sk-`` of a
# long run, each scanning to the run's end) or cost the most a character, by their text,
# and the form we run. A rule whose text changes upstream runs as it is, and the regex
# budget test (``tests/test_regex_budget.py``) baits it like every other pattern.
_REWRITES = {
    # The ``//registry/`` part is dropped: from every ``//`` of a line, ``.+`` ran to the
    # line's end. The secret is the group after ``_authToken=``, as before.
    r"\/\/.+\/:_authToken=\s*((npm_.+)|([A-Fa-f0-9-]{36})).*": (
        r"/:_authToken=\s*+((npm_.+)|([A-Fa-f0-9-]{36})).*"
    ),
    # A key starts a token: an ``sk-`` inside a longer run of its characters (``disk-``,
    # ``task-``) no longer starts a scan of the rest of that run.
    r"sk-[A-Za-z0-9-_]*[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20}": (
        r"sk-(?<![A-Za-z0-9_-]sk-)[A-Za-z0-9_-]*[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20}"
    ),
    # The same matches: the look-ahead (the quoted value within reach) spares the two
    # lazy windows at an ``aws`` that no value follows.
    r"aws.{0,20}?(?:key|pwd|pw|password|pass|token).{0,20}?[\'\"]([0-9a-zA-Z/+]{40})[\'\"]": (
        r"aws(?=.{0,48}?['\"][0-9a-zA-Z/+]{40}['\"])"
        r""".{0,20}?(?:key|pwd|pw|password|pass|token).{0,20}?['"]([0-9a-zA-Z/+]{40})['"]"""
    ),
    # An access key id is a whole token: inside a longer run of letters and digits (a
    # client's ULID event id holding ``A3T`` or ``ACCA``) it is not a key, and redacting
    # it there turned a valid id into a 422.
    r"(?:A3T[A-Z0-9]|ABIA|ACCA|AKIA|ASIA)[0-9A-Z]{16}": (
        r"(?<![0-9A-Za-z])(?:A3T[A-Z0-9]|ABIA|ACCA|AKIA|ASIA)[0-9A-Z]{16}(?![0-9A-Za-z])"
    ),
}


def _rewritten(pattern: re.Pattern[str]) -> re.Pattern[str]:
    form = _REWRITES.get(pattern.pattern)
    return pattern if form is None else re.compile(form, pattern.flags)


def _plugin_rules() -> list[tuple[str, re.Pattern[str]]]:
    rules: list[tuple[str, re.Pattern[str]]] = []
    for info in pkgutil.iter_modules(detect_secrets.plugins.__path__):
        module = importlib.import_module(f"detect_secrets.plugins.{info.name}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if (
                cls.__module__ != module.__name__
                or not issubclass(cls, RegexBasedDetector)
                or inspect.isabstract(cls)
                or cls.__name__ in _SKIPPED_PLUGINS
            ):
                continue
            # Class attributes, though the base class declares them as properties.
            kind = _slug(cls.secret_type)  # type: ignore[arg-type]
            patterns: list[re.Pattern[str]] = list(cls.denylist)  # type: ignore[call-overload]
            rules += [
                (kind, _rewritten(p))
                for p in patterns
                if not p.pattern.startswith(_ASSIGNMENT_RULE_PREFIX)
            ]
    return rules


_KEY_HEADERS = "|".join(
    re.escape(p.pattern.removeprefix("BEGIN "))
    for p in PrivateKeyDetector.denylist
    if p.pattern.startswith("BEGIN ")
)
# The whole armoured block; an unterminated one (a truncated tool output) runs to the end.
_PRIVATE_KEY = re.compile(
    rf"-----BEGIN (?:{_KEY_HEADERS})-----.*?(?:-----END [A-Z0-9 ]*-----|\Z)", re.DOTALL
)
_PUTTY_KEY = re.compile(r"PuTTY-User-Key-File-\d+:.*?(?:Private-MAC: *\S+|\Z)", re.DOTALL)

_EXTRA_RULES = [
    ("github-token", re.compile(r"github_pat_[A-Za-z0-9_]{82}")),
    # detect-secrets' JWT regex ends lazily (its verify step reads the rest): take all
    # three parts, and keep only those whose header decodes (``_jwt_ok``). A token starts
    # a run of its characters: from an ``eyJ`` inside one, every later ``eyJ`` would scan
    # the same run again.
    (
        "json-web-token",
        re.compile(
            r"eyJ(?<![A-Za-z0-9_-]eyJ)[A-Za-z0-9_-]{8,}+={0,2}\.[A-Za-z0-9_-]++={0,2}\."
            r"[A-Za-z0-9_-]*+"
        ),
    ),
]

# ``name = value`` where the name says it is a secret: detect-secrets' keyword list plus
# the words it lacks. The name may carry a prefix or suffix (``DB_PASSWORD``,
# ``secret_key``, ``self.api_key``); ``=``, ``:``, ``:=`` and ``=>`` all assign.
_KEYWORDS = "|".join([*DENYLIST, "token", "credentials?", "access_?key", "auth"])
# Found from the operator, then the name checked just before it: a regex starting from
# the keyword alternation is tried at every position, several times slower.
# A bare ``:`` assigns only before a space or a quote (YAML, JSON): ``12:15:18`` in every
# timestamp, ``host:port`` and ``C:\\`` do not.
_ASSIGNED_VALUE = re.compile(
    r"""(?::=|=>|=|:(?=[ \t"'`]))[ \t]*["'`]?(?P<value>[^\s"'`,;=>]{8,})"""
)
# Searched in the name's last ``.``/``-`` part (``self.api_key``, ``DB_PASSWORD``).
_SECRET_NAME = re.compile(_KEYWORDS, re.IGNORECASE)
MAX_NAME = 64
_NAME_REVERSED = re.compile(rf"[\w.-]{{1,{MAX_NAME}}}")
_NAME_PART = re.compile(r"[.-]")
# Values that are code, a reference or a placeholder rather than the secret itself.
_NOT_A_VALUE = re.compile(
    r"""^(?:[$%<{].*|.*[(){}\[\]<>].*  # template, expansion, code
       |[./~].*|\w+://.*  # a path or URL (basic auth has its own rule)
       |.*(?:x{4}|\*{3}|\.{3}|REDACTED|changeme|example|placeholder|your[_-]).*
       )$""",
    re.IGNORECASE | re.VERBOSE,
)


def _is_reference(value: str) -> bool:
    if not any(c.isdigit() for c in value) and value.replace("-", "_").isidentifier():
        return True  # a variable or a name: ``password = new_password``, ``token="from-env"``
    parts = value.split(".")
    if len(parts) > 1 and all(p.isidentifier() for p in parts):
        return True  # an attribute: ``token = self.settings.token``
    return bool(_NOT_A_VALUE.match(value))


# ``Authorization: Bearer <token>`` in a curl line or a logged request.
_BEARER = re.compile(r"\bBearer[ \t]+(?P<value>[A-Za-z0-9._~+/-]{16,}=*)")
MIN_ENTROPY = 3.0  # bits per character: 8+ random characters sit well above it


def entropy(value: str) -> float:
    counts = Counter(value)
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def _looks_random(value: str) -> bool:
    if _is_reference(value):
        return False
    classes = sum(
        (
            any(c.islower() for c in value),
            any(c.isupper() for c in value),
            any(c.isdigit() for c in value),
            any(not c.isalnum() for c in value),
        )
    )
    return classes >= 2 and entropy(value) >= MIN_ENTROPY


def _jwt_ok(token: str) -> bool:
    header = token.split(".", 1)[0]
    try:
        decoded = json.loads(base64.urlsafe_b64decode(header + "=" * (-len(header) % 4)))
    except (ValueError, UnicodeDecodeError):
        return False
    return isinstance(decoded, dict)


Span = tuple[int, int, str]
_DELIMITERS = " \t\r\n=:\"'"


def _secret_span(m: re.Match[str]) -> tuple[int, int]:
    """Where the secret is in a plugin's match. A plugin with groups names the secret in
    one (the key inside ``aws_secret = "..."``, the password of a URL), but some
    groups only pick a prefix (``ghp|gho``) or an optional part: take the longest group
    if it is not at the start and holds 8+ characters, else the whole match less the
    delimiters some patterns consume around it."""
    groups = [i for i in range(1, (m.re.groups or 0) + 1) if m.group(i)]
    if groups:
        best = max(groups, key=lambda i: len(m.group(i)))
        if m.start(best) > m.start() and len(m.group(best)) >= 8:
            return m.span(best)
    start, end = m.span()
    while start < end and m.string[start] in _DELIMITERS:
        start += 1
    while end > start and m.string[end - 1] in _DELIMITERS:
        end -= 1
    return start, end


Scanner = Callable[[str, str], Iterator[Span]]  # (text, text.lower()) -> spans


def _regex_spans(kind: str, pattern: re.Pattern[str]) -> Scanner:
    check = _jwt_ok if kind == "json-web-token" else None
    anchored = AnchoredPattern(pattern)

    def spans(text: str, lower: str) -> Iterator[Span]:
        for m in anchored.finditer(text, lower):
            start, end = _secret_span(m)
            if check is None or check(text[start:end]):
                yield start, end, kind

    return spans


def _value_spans(kind: str, pattern: re.Pattern[str]) -> Scanner:
    """Spans of the ``value`` group where it looks random (not code or a placeholder)."""
    anchored = AnchoredPattern(pattern)

    def spans(text: str, lower: str) -> Iterator[Span]:
        for m in anchored.finditer(text, lower):
            if _looks_random(m.group("value")):
                yield m.start("value"), m.end("value"), kind

    return spans


def _name_before(text: str, end: int) -> str:
    """The ``[\\w.-]`` name before spaces and up to two closing quotes or brackets. Read
    reversed, so ``match`` anchors it: a search for a name ending at ``end`` would try
    every position of the window."""
    window = text[max(0, end - MAX_NAME - 8) : end].rstrip(" \t")
    for _ in range(2):
        if window.endswith(('"', "'", "]")):
            window = window[:-1]
    m = _NAME_REVERSED.match(window[::-1])
    return m.group()[::-1] if m else ""


# An identifier's words: ``secret_sha256`` -> secret, sha, 256; ``apiKey2`` -> api, Key, 2.
_WORDS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")
_SECRET_WORD = re.compile(rf"(?<![^_])(?:{_KEYWORDS})(?![^_])")


def _secret_words(identifier: str) -> set[str]:
    joined = "_".join(w.lower() for w in _WORDS.findall(identifier))
    return {m.group().replace("_", "") for m in _SECRET_WORD.finditer(joined)}


def _forwards(name: str, value: str) -> bool:
    """``"secret_sha256": secret_sha256``, ``api_key=api_key2``, ``token: accessToken2``:
    the value is a variable named for the same secret as the name it is assigned to (an
    identifier of two words or more, each of two letters or more, and digits), not the
    secret. ``password_2024`` (one word) is a password."""
    if not value.isidentifier():
        return False
    words = _WORDS.findall(value)
    letters = [w for w in words if w.isalpha()]
    if "".join(words) != value.replace("_", "") or len(letters) < 2:
        return False
    if any(len(w) < 2 for w in letters):
        return False  # a random value: ``Xk9_fPq2Lm`` has one-letter words
    return bool(_secret_words(value) & _secret_words(name))


def _assignment_spans(text: str, lower: str) -> Iterator[Span]:
    for m in _ASSIGNED_VALUE.finditer(text):
        value = m.group("value")
        name = _name_before(text, m.start())
        if (
            name
            and _SECRET_NAME.search(_NAME_PART.split(name)[-1])
            and _looks_random(value)
            and not _forwards(name, value)
        ):
            yield m.start("value"), m.end("value"), "secret-assignment"


# --- structured values: ``{"password": "hunter2"}``, ``{"X-Api-Key": "..."}`` ----------

# A JSON key names a secret when its last word, or its last two joined, is one of these,
# whatever the case and separators (``apiKey``, ``api_key``, ``X-Api-Key``, ``API-KEY``).
_SECRET_KEY_ENDS = frozenset(
    {
        "password", "passwd", "pwd", "passphrase", "passcode", "secret", "token",
        "authorization", "cookie", "credential", "credentials", "apikey", "accesskey",
        "privatekey", "secretkey", "authkey", "accountkey", "signingkey", "encryptionkey",
        "masterkey", "sessionkey", "sharedkey",
    }
)  # fmt: skip
# Tokens that are positions, not credentials (``pageToken``, ``next_token``).
_CURSOR_WORDS = frozenset({"page", "next", "continuation", "sync", "resume", "cursor"})
MAX_KEY = 64
_KEY_LIKE = re.compile(rf"[A-Za-z][A-Za-z0-9_. -]{{0,{MAX_KEY - 1}}}")
# What stands in for a secret rather than being one: a reference, a template, a marker.
_TEMPLATE = re.compile(
    r"\$\{[^{}]*\}|\$\([^()]*\)|\$[A-Za-z_]\w*|\{\{[^{}]*\}\}|%[A-Za-z_]\w*%|<[^<>]*>"
    r"|\[REDACTED[^][]*\]"
)
_PLACEHOLDER_WORD = re.compile(
    r"changeme|change[-_ ]me|placeholder|example|your[-_ ]|dummy|redacted", re.IGNORECASE
)
_NO_VALUE = frozenset({"none", "null", "nil", "undefined", "true", "false", "n/a"})
# The shape of HTTP headers and form fields as lists: ``{"name": "Password", "value": ...}``.
_NAME_FIELDS = ("name", "key", "header")


def secret_key(key: str) -> bool:
    # Longer keys are never names; the cache then holds only short ones.
    return len(key) <= MAX_KEY and _names_secret(key)


@functools.lru_cache(maxsize=4096)  # an event's keys are mostly the same few dozen
def _names_secret(key: str) -> bool:
    if not _KEY_LIKE.fullmatch(key):
        return False
    words = [w.lower() for w in _WORDS.findall(key) if not w.isdigit()]
    if not words or (len(words) > 1 and words[-2] in _CURSOR_WORDS):
        return False
    return words[-1] in _SECRET_KEY_ENDS or "".join(words[-2:]) in _SECRET_KEY_ENDS


def placeholder(value: str) -> bool:
    """Empty, one character repeated (``***``, ``xxx``), a reference or template
    (``${VAR}``, ``<your-token>``, ``{{ secrets.X }}``) or a word that says so."""
    value = value.strip()
    return (
        len(set(value.lower())) <= 1
        or value.lower() in _NO_VALUE
        or _TEMPLATE.fullmatch(value) is not None
        or _PLACEHOLDER_WORD.search(value) is not None
    )


def secret_fields(obj: dict[Any, Any]) -> list[Any]:
    """The keys of ``obj`` whose string values are secrets by the key's name (or, in a
    ``{"name": ..., "value": ...}`` pair, by the name's)."""
    named = isinstance(obj.get("value"), str) and any(
        isinstance(obj.get(f), str) and secret_key(obj[f]) for f in _NAME_FIELDS
    )
    return [
        k
        for k, v in obj.items()
        if isinstance(v, str)
        and isinstance(k, str)
        and (secret_key(k) or (named and k == "value"))
        and not placeholder(v)
    ]


# Every format rule, by kind (the regex budget test baits each).
RULES: list[tuple[str, re.Pattern[str]]] = [
    ("private-key", _PRIVATE_KEY),
    ("private-key", _PUTTY_KEY),
    *_plugin_rules(),
    *_EXTRA_RULES,
]
_SCANNERS: list[Scanner] = [
    *(_regex_spans(kind, p) for kind, p in RULES),
    _assignment_spans,
    _value_spans("bearer-token", _BEARER),
]


def find_each(texts: list[str]) -> list[list[Span]]:
    """``find`` of each text. Each rule first reads the texts joined by newlines, up to its
    first span: most requests hold no credential, and one pass over the joined text costs
    about what one short string does (a few dozen rule calls), where an event has dozens
    of strings. Only a rule that found one then reads each text alone, so the spans are
    exactly each text's own (no match spans two texts, and none depends on the text next
    to it: a rule that finds nothing joined finds nothing in any of them, which
    ``tests/test_secrets.py`` checks on nested values)."""
    if len(texts) == 1:
        return [find(texts[0])]
    joined = "\n".join(texts)
    lower = joined.lower()
    live = [scan for scan in _SCANNERS if next(scan(joined, lower), None) is not None]
    return [_resolve(text, live) if live else [] for text in texts]


def _resolve(text: str, scans: list[Scanner]) -> list[Span]:
    lower = text.lower()
    found = sorted((s for scan in scans for s in scan(text, lower)), key=lambda s: (s[0], -s[1]))
    spans: list[Span] = []
    for span in found:
        if spans and span[0] < spans[-1][1]:
            if span[1] > spans[-1][1] and span[0] == spans[-1][0]:
                spans[-1] = span
            continue
        spans.append(span)
    return spans


def find(text: str) -> list[Span]:
    """Non-overlapping ``(start, end, kind)`` spans, in order; the earliest, then the
    longest, wins an overlap."""
    return _resolve(text, _SCANNERS)


def redact_each(texts: list[str]) -> list[str]:
    return [_redacted(text, spans) for text, spans in zip(texts, find_each(texts), strict=True)]


def redact(text: str) -> str:
    return _redacted(text, find(text))


def _redacted(text: str, spans: list[Span]) -> str:
    if not spans:
        return text
    out: list[str] = []
    cursor = 0
    for start, end, kind in spans:
        out += [text[cursor:start], f"[REDACTED:{kind}]"]
        cursor = end
    out.append(text[cursor:])
    return "".join(out)


def kinds() -> list[str]:
    """Every kind this scanner can report (for the docs and tests)."""
    return sorted({kind for kind, _ in RULES} | {"secret-assignment", "bearer-token"})
