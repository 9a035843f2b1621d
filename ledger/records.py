"""The records callers exchange with the ledger: requests, decisions, settlements, reports.

These are plain frozen dataclasses; the ledger checks them (`ledger.checks`)
before anything is read or written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

from ledger.errors import BudgetExceededError
from ledger.watermark import StreamClaim
from mechanisms.cost import Cost, StepRun, WEventCost

RELEASE_STATES = ("reserved", "settled", "closed", "failed")


@dataclass(frozen=True)
class Request:
    """One budget request of a release for one user.

    Attributes:
        user_id: the user whose budget is charged.
        domain: the policy domain (its notion and cap apply).
        step: name of the mechanism step (idempotency key part), e.g. ``"release"``.
        notion: the mechanism's guarantee: ``gp`` (amount is ε), ``cgp`` (ρ) or
            ``wevent`` (use `runs`).
        amount: ε or ρ for gp/cgp requests (Fraction, int, float or string).
        stream_id: the stream of a w-event request (``""`` for curves).
        runs: w-event per-step costs at absolute time steps of the stream.
        stream_claim: for an incremental stream release, the range it releases
            and the watermark it continues (`ledger.watermark`); None otherwise.
    """

    user_id: str
    domain: str
    step: str = "release"
    notion: str = "gp"
    amount: Fraction | None = None
    stream_id: str = ""
    runs: tuple[StepRun, ...] = ()
    stream_claim: StreamClaim | None = None


@dataclass(frozen=True)
class Decision:
    """The ledger's answer to one request.

    ``requested`` is the request's cost in the domain's own notion (ε²/2 for an
    ε-GP request on a CGP domain; for w-event the request's sum in its worst
    window). ``remaining`` is the headroom *after* the charge when admitted and
    *before* it when denied (for w-event: in that worst window), so a denial
    shows ``requested - remaining > 0``.
    """

    user_id: str
    domain: str
    step: str
    stream_id: str
    admitted: bool
    reason: str
    requested: Fraction
    remaining: Fraction
    entry_seq: int
    replayed: bool = False
    notion: str = ""
    units: str = ""

    def raise_if_denied(self, release_id: str | None = None) -> None:
        """Raise `BudgetExceededError` (exit 3) when this decision is a denial."""
        if not self.admitted:
            raise BudgetExceededError(
                user_id=self.user_id, domain=self.domain, requested=self.requested,
                remaining=self.remaining, units=self.units, release_id=release_id,
                reason=self.reason,
            )


@dataclass(frozen=True)
class ReserveResult:
    """Decisions of one `Ledger.reserve` call, in request order within each list."""

    admitted: list[Decision] = field(default_factory=list)
    denied: list[Decision] = field(default_factory=list)

@dataclass(frozen=True)
class Settlement:
    """The actual cost of an admitted request, reported after the mechanism ran.

    ``cost`` is a `mechanisms.cost.Cost` (gp/cgp, with its sub-step breakdown) or
    a `WEventCost` whose runs use the same absolute steps as the reservation.
    """

    user_id: str
    domain: str
    step: str
    cost: Cost | WEventCost
    stream_id: str = ""


@dataclass(frozen=True)
class VerifyReport:
    """Result of `Ledger.verify`."""

    ok: bool
    entries_checked: int
    first_bad_seq: int | None
    message: str
    first_bad_entry_id: str | None = None
    not_checked: tuple[str, ...] = ()
    """What this verify could not check (auditor mode: what needs the noise key)."""


@dataclass(frozen=True)
class SignedHead:
    """The chain head (seq, hash) of one ledger, signed with its Ed25519 key.

    ``signature`` covers (ledger_id, schema_version, seq, hash) and from
    schema 4 also the verification ``rules``, the ``key_fingerprint`` and the
    head ``counter``, see `ledger.signing.head_message`; ``key_fingerprint`` is
    the SHA-256 of the raw public key (``public_key``, hex). An auditor keeps
    these (a checkpoint file, a release manifest) to detect a later rollback,
    truncation or re-keying.
    """

    ledger_id: str
    schema_version: int
    seq: int
    hash: str
    signature: str
    key_fingerprint: str
    public_key: str
    counter: int | None = None
    rules: str | None = None

    def to_dict(self) -> dict[str, object]:
        """The head as plain JSON-ready data (``counter`` and ``rules`` from schema 4)."""
        out: dict[str, object] = {
            "ledger_id": self.ledger_id, "schema_version": self.schema_version,
            "seq": self.seq, "hash": self.hash, "signature": self.signature,
            "key_fingerprint": self.key_fingerprint, "public_key": self.public_key}
        if self.counter is not None:
            out["counter"] = self.counter
            out["rules"] = self.rules
        return out
