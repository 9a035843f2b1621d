"""What an auditor's listing is narrowed to: user, domain, release and a time range.

A `Filter` selects ledger entries. It is turned into a SQL condition with
parameters (`Filter.where`), never into SQL text with the values in it. Times
are ISO 8601 (a date, or a date and time; a time with an offset is converted
to UTC, one without is read as UTC, the ledger's clock); ``since`` is
inclusive and ``until`` exclusive, so ``--since 2026-01-01 --until
2026-02-01`` is January. Filters narrow listings only: `verify` always checks
the whole chain.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ledger.checks import check_id
from schemas.errors import ParameterError

__all__ = ["Filter", "parse_time"]


def parse_time(text: str | None, flag: str) -> datetime | None:
    """An ISO 8601 date or date-time as a naive UTC datetime (None for None).

    Raises:
        ParameterError: naming `flag` and the rule, when `text` is not ISO 8601.
    """
    if text is None:
        return None
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ParameterError(
            f"{flag} must be an ISO 8601 date or date-time (e.g. 2026-01-31 or "
            f"2026-01-31T12:00:00Z), got {text!r}") from None
    if when.tzinfo is not None:
        when = when.astimezone(UTC).replace(tzinfo=None)
    return when


@dataclass(frozen=True)
class Filter:
    """Entries of one user, domain and release, created in [since, until) (None: any)."""

    user: str | None = None
    domain: str | None = None
    release: str | None = None
    since: datetime | None = None
    until: datetime | None = None

    def __post_init__(self) -> None:
        """Check the ids and that the time range is not empty.

        Raises:
            ParameterError: naming the flag and the rule.
        """
        for value, flag in ((self.user, "--user"), (self.domain, "--domain"),
                            (self.release, "--release")):
            if value is not None:
                check_id(value, flag, allow_empty=True)
        if self.since is not None and self.until is not None and self.since >= self.until:
            raise ParameterError(
                f"--since ({self.since.isoformat()}) must be before --until "
                f"({self.until.isoformat()}): --since is inclusive, --until exclusive")

    @classmethod
    def parse(cls, *, user: str | None = None, domain: str | None = None,
              release: str | None = None, since: str | None = None,
              until: str | None = None) -> Filter:
        """A filter from command-line text (times as ISO 8601)."""
        return cls(user, domain, release, parse_time(since, "--since"),
                   parse_time(until, "--until"))

    @property
    def empty(self) -> bool:
        """True when it selects everything."""
        return self == Filter()

    def where(self, alias: str = "", *, user: bool = True, release: bool = True,
              time: bool = True) -> tuple[str, list[Any]]:
        """A SQL condition on the entries (as `alias`) and its parameters.

        `user`, `release` and `time` False leave that part out (e.g. the
        policy history, whose entries have no user or release).
        """
        p = f"{alias}." if alias else ""
        parts, params = ["TRUE"], []
        for use, column, value in ((user, "user_id", self.user), (True, "domain", self.domain),
                                   (release, "release_id", self.release)):
            if use and value is not None:
                parts.append(f"{p}{column} = ?")
                params.append(value)
        if time and self.since is not None:
            parts.append(f"{p}created_at >= CAST(? AS TIMESTAMP)")
            params.append(self.since)
        if time and self.until is not None:
            parts.append(f"{p}created_at < CAST(? AS TIMESTAMP)")
            params.append(self.until)
        return " AND ".join(parts), params

    def to_dict(self) -> dict[str, str | None]:
        """The filter as JSON-ready text (times ISO 8601, UTC)."""
        return {"user": self.user, "domain": self.domain, "release": self.release,
                "since": None if self.since is None else self.since.isoformat(),
                "until": None if self.until is None else self.until.isoformat()}
