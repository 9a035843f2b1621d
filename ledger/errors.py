"""Errors of the privacy ledger, in the `schemas.errors` family.

Exit codes (see `schemas.errors`): `BudgetExceededError` 3, `LedgerIntegrityError`
4, `LedgerOpenError` and the other bad-input errors 2, `LedgerInternalError` 1.
No error text ever carries the noise key or private data values; user ids,
release ids and domain names are identifiers and are shown (quoted with repr so
that hostile ids print verbatim and unambiguously).
"""

from __future__ import annotations

from fractions import Fraction

from ledger.amounts import format_fraction
from schemas.errors import EXIT_DENIED, EXIT_INTEGRITY, BadInputError, ParameterError, PrivpipeError


class BudgetExceededError(PrivpipeError):
    """A request would exceed a privacy cap; nothing was charged for it.

    The message shows Requested / Remaining / Difference with units and what to do.
    """

    exit_code = EXIT_DENIED

    def __init__(
        self,
        *,
        user_id: str,
        domain: str,
        requested: Fraction,
        remaining: Fraction,
        units: str,
        release_id: str | None = None,
        reason: str = "",
    ):
        self.user_id = user_id
        self.domain = domain
        self.requested = requested
        self.remaining = remaining
        self.units = units
        self.release_id = release_id
        self.reason = reason
        difference = requested - remaining
        where = f" (release {release_id!r})" if release_id is not None else ""
        lines = [
            f"privacy budget exceeded for user {user_id!r} in domain {domain!r}{where}",
            f"  Requested:  {format_fraction(requested)} {units}",
            f"  Remaining:  {format_fraction(remaining)} {units}",
            f"  Difference: {format_fraction(difference)} {units}",
        ]
        if reason:
            lines.append(f"  Reason:     {reason}")
        lines.append(
            "Nothing was charged and no noise was drawn. Request at most the remaining "
            "amount, or raise the domain's cap in the policy (a compliance decision)."
        )
        super().__init__("\n".join(lines))


class LedgerIntegrityError(PrivpipeError):
    """The ledger's hash chain, balances or key fingerprint do not verify.

    Attributes:
        seq: sequence number of the first bad entry (None if the fault is not an entry).
        entry_id: id of the first bad entry, when known.
    """

    exit_code = EXIT_INTEGRITY

    def __init__(self, message: str, *, seq: int | None = None, entry_id: str | None = None):
        self.seq = seq
        self.entry_id = entry_id
        super().__init__(message)


class LedgerOpenError(BadInputError):
    """The ledger cannot be opened: missing, unreadable, foreign, newer schema or key problem."""


class LedgerBusyError(LedgerOpenError):
    """Another process held the ledger for longer than the retry bound."""


class LedgerStorageError(LedgerOpenError):
    """The file system refused a write (full disk, size limit, I/O error); nothing committed."""


class NotionMismatchError(ParameterError):
    """A charge's notion does not fit the domain (e.g. a CGP mechanism on a GP domain)."""


class ReplayConflictError(ParameterError):
    """A release id is reused for a different request or settlement than the recorded one."""


class PublishedFileError(BadInputError):
    """A published file the ledger's store refuses or does not keep (`ledger.published`)."""


class PolicyChangeError(BadInputError):
    """A policy change would alter the meaning of budget already charged."""


class LedgerInternalError(PrivpipeError):
    """An invariant of the ledger's callers was broken: this is a bug (exit 1)."""

    def __init__(self, message: str):
        super().__init__(f"this is a bug: {message}")
