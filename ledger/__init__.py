"""The DuckDB privacy ledger: exact budgets, reservations, hash-chained audit, signed heads.

See ``ledger/README.md`` for the accounting model, the concurrency guarantee,
the audit chain, policy history, keys, migrations, the CLI and the SQL views
for auditors; ``docs/ledger.md`` for operators and auditors.
"""

from ledger.amounts import (
    UNITS_PER_EPSILON,
    cap_units,
    charge_units,
    format_fraction,
    format_units,
    from_units,
    is_exact,
)
from ledger.errors import (
    BudgetExceededError,
    LedgerBusyError,
    LedgerIntegrityError,
    LedgerInternalError,
    LedgerOpenError,
    LedgerStorageError,
    NotionMismatchError,
    PolicyChangeError,
    PublishedFileError,
    ReplayConflictError,
)
from ledger.filters import Filter, parse_time
from ledger.keys import key_path_for
from ledger.ledger import (
    Decision,
    Ledger,
    Request,
    ReserveResult,
    Settlement,
    SignedHead,
    VerifyReport,
    default_actor,
    default_ledger_path,
)
from ledger.watermark import StreamClaim, StreamContinuityError, StreamRange

__all__ = [
    "UNITS_PER_EPSILON",
    "BudgetExceededError",
    "Decision",
    "Filter",
    "Ledger",
    "LedgerBusyError",
    "LedgerIntegrityError",
    "LedgerInternalError",
    "LedgerOpenError",
    "LedgerStorageError",
    "NotionMismatchError",
    "PolicyChangeError",
    "PublishedFileError",
    "ReplayConflictError",
    "Request",
    "ReserveResult",
    "Settlement",
    "SignedHead",
    "StreamClaim",
    "StreamContinuityError",
    "StreamRange",
    "VerifyReport",
    "cap_units",
    "charge_units",
    "default_actor",
    "default_ledger_path",
    "format_fraction",
    "format_units",
    "from_units",
    "is_exact",
    "key_path_for",
    "parse_time",
]
