"""Audit: the retrieval log (what each prompt was given), the audit log of destructive
actions, and the API tokens whose holders act."""

from __future__ import annotations

import abc
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from wakemark.shared.models import Retrieval


@dataclass(frozen=True)
class RetrievalSession:
    """Sums over one session's retrieval audit rows (kept by triggers)."""

    namespace: str
    session_id: str
    prompts: int
    injected: int  # prompts that got a block
    records: int  # records injected, over all its prompts
    bytes: int  # bytes injected, over all its prompts
    latency_ms: float  # summed
    first_at: datetime
    last_at: datetime


@dataclass(frozen=True)
class ApiToken:
    """A scoped API token as stored (never its secret: only a SHA-256 of it)."""

    token_id: str
    name: str
    actor: str
    project: str | None  # None: every project of the actor
    read_only: bool
    created_at: datetime
    expires_at: datetime | None = None
    revoked_at: datetime | None = None
    last_used_at: datetime | None = None


@dataclass(frozen=True)
class AuditEntry:
    """One destructive action: who (a token id and name, "bootstrap" or "cli:<user>"),
    what (action, namespace, target ids, count) and when."""

    who: str
    action: str  # "delete", "bulk_delete", "import", "token_create", "token_revoke", ...
    namespace: str | None
    targets: tuple[str, ...]
    count: int
    at: datetime
    id: int | None = None  # assigned by storage

    def row(self) -> dict[str, Any]:
        """The columns an insert writes (``at`` as a datetime, ``targets`` as a list)."""
        return {
            "at": self.at,
            "who": self.who,
            "action": self.action,
            "namespace": self.namespace,
            "targets": list(self.targets),
            "count": self.count,
        }


class AuditTx(Protocol):
    """The audit and token writes of a transaction: each commits with its action."""

    @abc.abstractmethod
    def audit(self, entry: AuditEntry) -> None:
        """Append to the audit log, committed with the action it records."""

    @abc.abstractmethod
    def put_token(self, token: ApiToken, secret_sha256: str) -> None: ...

    @abc.abstractmethod
    def revoke_token(self, token_id: str, when: datetime) -> bool:
        """False if there is no such token or it was already revoked."""


class RetrievalLog(Protocol):
    @abc.abstractmethod
    def put_retrieval(self, retrieval: Retrieval) -> None:
        """Store one audit row. Raises NotFoundError if its prompt event is not stored:
        a row lives as long as its event (deleting the event deletes it)."""

    @abc.abstractmethod
    def get_retrieval(self, retrieval_id: str) -> Retrieval | None: ...

    @abc.abstractmethod
    def list_retrievals(
        self,
        namespace: str | None = None,
        session_id: str | None = None,
        limit: int = 50,
        after: tuple[datetime, str] | None = None,
    ) -> list[Retrieval]:
        """Newest first (created_at desc, retrieval_id desc); ``after``: the
        ``(created_at, retrieval_id)`` of the previous page's last row."""

    @abc.abstractmethod
    def session_injections(
        self, namespace: str, session_id: str, limit: int
    ) -> list[tuple[str, list[str]]]:
        """``(event_id, injected record ids)`` of the session's last ``limit`` rows under
        ``namespace``, in ``list_retrievals`` order: what the prompt path reads, without
        decoding whole rows."""

    @abc.abstractmethod
    def retrieval_sessions(
        self, namespace: str, limit: int = 50, after: tuple[datetime, str] | None = None
    ) -> list[RetrievalSession]:
        """The sessions of one namespace that have audit rows, most recent prompt first
        (last_at desc, session_id desc); ``after``: the previous page's last
        ``(last_at, session_id)``."""

    @abc.abstractmethod
    def retrieval_totals(self, namespace: str | None = None) -> dict[str, float]:
        """``prompts``, ``injected``, ``records``, ``bytes``, ``latency_ms`` summed over
        every audit row under the namespace (prefix; None: all)."""

    @abc.abstractmethod
    def delete_retrievals(self, created_before: datetime) -> int:
        """Delete the retrieval audit rows created before the time; returns how many."""


class Tokens(Protocol):
    @abc.abstractmethod
    def token_by_hash(self, secret_sha256: str) -> ApiToken | None:
        """The token with that secret hash, revoked or expired ones included."""

    @abc.abstractmethod
    def list_tokens(self) -> list[ApiToken]:
        """Oldest first."""

    @abc.abstractmethod
    def touch_token(self, token_id: str, when: datetime) -> None:
        """Set ``last_used_at``."""


class AuditLog(Protocol):
    @abc.abstractmethod
    def list_audit(self, limit: int = 100) -> list[AuditEntry]:
        """Newest first."""


class Audit(RetrievalLog, Tokens, AuditLog, Protocol):
    """The whole concern; a consumer needing one part is typed with that part."""
