"""Credential scanning at capture: known secret formats become ``[REDACTED:<kind>]``.

The formats are detect-secrets' (1.5) regex plugins, read from the installed package at
import, so its rule set is maintained upstream. We do not call its ``scan_line``: it costs
~400 µs a line (settings, filters, code snippets) against a few µs for the same regexes
compiled here. Left out on purpose: its entropy plugins (they flag every git SHA, sha256
and UUID), the public-IP plugin (an address is not a credential) and its keyword plugin,
whose file-type regex tables we replace with one assignment rule below that also knows
``token``/``.env`` lines and asks the value to look random.

Added here because detect-secrets' regexes stop short of them: the whole private-key
block (it matches the BEGIN line only), GitHub fine-grained tokens, and the JWT check
that the header is base64 JSON (its own check lives in a verify step we do not run).
"""

from __future__ import annotations

import base64
import importlib
import inspect
import json
import math
import pkgutil
import re
from collections import Counter
from collections.abc import Callable, Iterator

import detect_secrets.plugins
from detect_secrets.plugins.base import RegexBasedDetector
from detect_secrets.plugins.keyword import DENYLIST
from detect_secrets.plugins.private_key import PrivateKeyDetector

# Plugins whose regexes we do not take (see the module docstring).
_SKIPPED_PLUGINS = {"IPPublicDetector", "PrivateKeyDetector", "JwtTokenDetector"}


def _slug(secret_type: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", secret_type.lower()).strip("-")


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
            rules += [(kind, pattern) for pattern in cls.denylist]  # type: ignore[attr-defined]
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
    # three parts, and keep only those whose header decodes (``_jwt_ok``).
    (
        "json-web-token",
        re.compile(r"eyJ[A-Za-z0-9_-]{8,}={0,2}\.[A-Za-z0-9_-]+={0,2}\.[A-Za-z0-9_-]*"),
    ),
]

# ``name = value`` where the name says it is a secret: detect-secrets' keyword list plus
# the words it lacks. The name may carry a prefix or suffix (``DB_PASSWORD``,
# ``secret_key``, ``self.api_key``); ``=``, ``:``, ``:=`` and ``=>`` all assign.
_KEYWORDS = "|".join([*DENYLIST, "token", "credentials?", "access_?key", "auth"])
_ASSIGNMENT = re.compile(
    rf"""(?:{_KEYWORDS})\w*["'\]]{{0,2}}[ \t]*(?::=|=>|=|:)[ \t]*
    (?P<q>["'`]?)(?P<value>[^\s"'`,;]{{8,}})""",
    re.IGNORECASE | re.VERBOSE,
)
# Substrings one of which every assignment holds: a plain ``in`` test over them costs
# ~1 µs, the assignment regex ~10 µs, and 98 % of ordinary lines hold none of them.
_ASSIGNMENT_HINTS = (
    "key",
    "pass",
    "pwd",
    "secret",
    "token",
    "auth",
    "credential",
    "contrase",
    "bearer",
)
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
MIN_ENTROPY = 3.0  # bits per character; English words and identifiers sit below ~3.2


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


def _regex_spans(kind: str, pattern: re.Pattern[str]) -> Callable[[str], Iterator[Span]]:
    check = _jwt_ok if kind == "json-web-token" else None

    def spans(text: str) -> Iterator[Span]:
        for m in pattern.finditer(text):
            start, end = _secret_span(m)
            if check is None or check(text[start:end]):
                yield start, end, kind

    return spans


def _assignment_spans(text: str) -> Iterator[Span]:
    lower = text.lower()
    if not any(hint in lower for hint in _ASSIGNMENT_HINTS):
        return
    for m in _ASSIGNMENT.finditer(text):
        value = m.group("value")
        if _looks_random(value):
            yield m.start("value"), m.end("value"), "secret-assignment"
    for m in _BEARER.finditer(text):
        if _looks_random(m.group("value")):
            yield m.start("value"), m.end("value"), "bearer-token"


_SCANNERS: list[Callable[[str], Iterator[Span]]] = [
    _regex_spans("private-key", _PRIVATE_KEY),
    _regex_spans("private-key", _PUTTY_KEY),
    *(_regex_spans(kind, p) for kind, p in [*_plugin_rules(), *_EXTRA_RULES]),
    _assignment_spans,
]


def find(text: str) -> list[Span]:
    """Non-overlapping ``(start, end, kind)`` spans, in order; the earliest, then the
    longest, wins an overlap."""
    found = sorted((s for scan in _SCANNERS for s in scan(text)), key=lambda s: (s[0], -s[1]))
    spans: list[Span] = []
    for span in found:
        if spans and span[0] < spans[-1][1]:
            if span[1] > spans[-1][1] and span[0] == spans[-1][0]:
                spans[-1] = span
            continue
        spans.append(span)
    return spans


def any_secret(text: str) -> bool:
    return any(next(scan(text), None) is not None for scan in _SCANNERS)


def redact(text: str) -> str:
    spans = find(text)
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
    plugin = {kind for kind, _ in [*_plugin_rules(), *_EXTRA_RULES]}
    return sorted(plugin | {"private-key", "secret-assignment", "bearer-token"})
