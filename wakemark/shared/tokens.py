"""Scoped API tokens: making one, finding one by its secret, and what it may see.

A secret is ``wmk_`` and 32 random bytes (URL-safe base64); storage keeps only its
SHA-256. A slow KDF (bcrypt, scrypt, argon2) exists to make guessing a low-entropy
password expensive; nobody guesses a 256-bit random secret from its hash, slow or not.
A plain hash also lets every request find its token with one indexed lookup instead of
spending tens of milliseconds of CPU per request on a KDF.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from wakemark.shared.models import new_ulid, utcnow
from wakemark.shared.storage import ApiToken, AuditEntry, Transactions

SECRET_PREFIX = "wmk_"
_DURATION = re.compile(r"^(\d{1,6})([mhdw])$")
_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


@dataclass(frozen=True)
class Principal:
    """Who a request acts as. ``actor`` None: the bootstrap token, which sees everything."""

    who: str  # as the audit log names it
    token_id: str | None = None
    actor: str | None = None
    project: str | None = None  # None: every project of the actor
    read_only: bool = False

    @property
    def prefix(self) -> str | None:
        """The namespace prefix this principal is limited to (None: no limit)."""
        if self.actor is None:
            return None
        if self.project is None:
            return f"/actor/{self.actor}/"
        return f"/actor/{self.actor}/project/{self.project}/"

    def covers(self, namespace: str) -> bool:
        # Both end in "/", so /actor/al/ never covers /actor/alice/.
        return self.prefix is None or namespace.startswith(self.prefix)


BOOTSTRAP = Principal(who="bootstrap")


def principal_of(token: ApiToken) -> Principal:
    return Principal(
        who=f"{token.token_id} ({token.name})" if token.name else token.token_id,
        token_id=token.token_id,
        actor=token.actor,
        project=token.project,
        read_only=token.read_only,
    )


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogateescape")).hexdigest()


def usable(token: ApiToken, now: datetime) -> bool:
    return token.revoked_at is None and (token.expires_at is None or now < token.expires_at)


def parse_duration(raw: str) -> timedelta:
    """``90m``, ``12h``, ``30d`` or ``2w``."""
    match = _DURATION.match(raw.strip().lower())
    if not match or int(match.group(1)) == 0:
        raise ValueError(f"expected a duration like 30d, 12h, 90m or 2w, got {raw!r}")
    return timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})


def create(
    storage: Transactions,
    *,
    actor: str,
    project: str | None,
    read_only: bool,
    expires: timedelta | None,
    name: str,
    who: str,
) -> tuple[ApiToken, str]:
    """Store a new token (and its audit row, in one transaction); returns it and the
    secret, which exists nowhere else from then on."""
    from wakemark.shared.project import sanitize_actor

    scope = Principal(who, actor=actor, project=project).prefix or ""
    # The actor as hooks will compute it (sanitize_actor), or they could never match.
    if sanitize_actor(actor) != actor or not re.fullmatch(
        r"/actor/[^/]+/(project/[^/\s]+/)?", scope
    ):
        raise ValueError("actor and project must be non-empty and contain no '/' or spaces")
    now = utcnow()
    token = ApiToken(
        token_id="tok_" + new_ulid(),
        name=name,
        actor=actor,
        project=project,
        read_only=read_only,
        created_at=now,
        expires_at=now + expires if expires else None,
    )
    secret = SECRET_PREFIX + secrets.token_urlsafe(32)
    with storage.transaction() as tx:
        tx.put_token(token, hash_secret(secret))
        tx.audit(AuditEntry(who, "token_create", scope, (token.token_id,), 1, now))
    return token, secret


def revoke(storage: Transactions, token_id: str, who: str) -> bool:
    now = utcnow()
    with storage.transaction() as tx:
        done = tx.revoke_token(token_id, now)
        if done:
            tx.audit(AuditEntry(who, "token_revoke", None, (token_id,), 1, now))
    return done
