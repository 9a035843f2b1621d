"""DDL, migrations and auditor views of the ledger database.

Tables (amounts are integer quanta, see `ledger.amounts`):

* ``schema_version(component, version, migrated_at)``: one row,
  component ``privpipe-ledger``. A file without it is foreign; a newer version
  is refused (upgrade privpipe).
* ``meta(key, value)``: ledger id, quantum, noise-key fingerprint (an HMAC, never
  the key).
* ``chain_head(id, last_seq, last_hash, seal, signature, counter)``: the tip of
  the hash chain, a keyed seal over it (schema 3: also over the schema version;
  schema 4: and the counter) and an Ed25519 signature (schema 3; schema 4 also
  covers the verification rules, the key fingerprint and the counter); the
  counter (schema 4) grows by one at every head write and is recorded outside
  the database (`ledger.counter`); every writing transaction updates this one
  row, which also serialises concurrent writers inside one process.
* ``domains``: the policy's domains (notion, cap, w, units; schema 3: the whole
  definition as canonical JSON and the seq of the domain's latest ``policy``
  entry), each row with a keyed ``mac`` (schema v2) so a cap raised with plain
  SQL is detected.
* ``accounts(user_id, domain, stream_id, cap, spent)``: ``stream_id`` is ``''``
  for curve domains. ``spent`` is the running total (gp, cgp) or the current
  largest window sum (wevent); `verify` recomputes it from the entries.
* ``entries``: the append-only, hash-chained log (kinds reserve, settle,
  refund, deny, close; schema 3: policy, one per domain change, with the old
  and new state in ``detail``). ``cap`` and ``balance_after`` record what each decision
  was checked against, so every admission can be re-checked by an auditor.
* ``step_runs``: the w-event per-step costs of an entry as runs
  ``[run_start, run_stop)`` (its kind, user, domain and stream copied for
  fast lookups), hashed with their entry.
* ``releases``: manifest JSON and state (reserved | settled | closed | failed), with
  a keyed ``mac`` (schema v2) so an edited manifest or state is detected.

Views for auditors (plain ``duckdb`` CLI): ``balances`` (with each account's
``state``: ok, near cap or above a lowered cap), ``release_summary``,
``denials``, ``near_cap``, ``above_cap``, ``user_history``, ``policy_history``
(schema 3). ε/ρ columns in views are DOUBLE for
reading; the exact values are the ``*_quanta`` columns divided by
``units_per_epsilon``.
"""

from __future__ import annotations

from collections.abc import Callable

import duckdb

from ledger.amounts import UNITS_PER_EPSILON
from ledger.keys import row_mac

COMPONENT = "privpipe-ledger"
SCHEMA_VERSION = 4

_U = f"CAST({UNITS_PER_EPSILON} AS DOUBLE)"

TABLES: tuple[str, ...] = (
    """CREATE TABLE schema_version (
        component VARCHAR PRIMARY KEY,
        version INTEGER NOT NULL,
        migrated_at TIMESTAMP NOT NULL)""",
    """CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR NOT NULL)""",
    """CREATE TABLE chain_head (
        id INTEGER PRIMARY KEY,
        last_seq BIGINT NOT NULL,
        last_hash VARCHAR NOT NULL,
        seal VARCHAR NOT NULL,
        signature VARCHAR,
        counter BIGINT)""",
    """CREATE TABLE domains (
        domain VARCHAR PRIMARY KEY,
        kind VARCHAR NOT NULL,
        notion VARCHAR NOT NULL CHECK (notion IN ('gp', 'cgp', 'wevent')),
        cap HUGEINT NOT NULL CHECK (cap >= 0),
        cap_exact VARCHAR NOT NULL,
        w INTEGER,
        time_unit VARCHAR NOT NULL,
        value_unit VARCHAR NOT NULL,
        units_label VARCHAR NOT NULL,
        created_at TIMESTAMP NOT NULL,
        updated_at TIMESTAMP NOT NULL,
        mac VARCHAR,
        definition VARCHAR,
        policy_seq BIGINT)""",
    """CREATE TABLE accounts (
        user_id VARCHAR NOT NULL,
        domain VARCHAR NOT NULL,
        stream_id VARCHAR NOT NULL,
        cap HUGEINT NOT NULL,
        spent HUGEINT NOT NULL,
        PRIMARY KEY (user_id, domain, stream_id))""",
    """CREATE TABLE entries (
        seq BIGINT NOT NULL,
        entry_id VARCHAR NOT NULL,
        prev_hash VARCHAR NOT NULL,
        hash VARCHAR NOT NULL,
        created_at TIMESTAMP NOT NULL,
        actor VARCHAR NOT NULL,
        release_id VARCHAR NOT NULL,
        user_id VARCHAR NOT NULL,
        domain VARCHAR NOT NULL,
        step VARCHAR NOT NULL,
        stream_id VARCHAR NOT NULL,
        kind VARCHAR NOT NULL,
        amount HUGEINT NOT NULL,
        notion VARCHAR NOT NULL,
        cap HUGEINT,
        balance_after HUGEINT,
        mechanism VARCHAR,
        parameters VARCHAR,
        detail VARCHAR,
        reason VARCHAR,
        flow_run_id VARCHAR,
        input_fingerprint VARCHAR)""",
    """CREATE TABLE step_runs (
        seq BIGINT NOT NULL,
        kind VARCHAR NOT NULL,
        user_id VARCHAR NOT NULL,
        domain VARCHAR NOT NULL,
        stream_id VARCHAR NOT NULL,
        run_start BIGINT NOT NULL,
        run_stop BIGINT NOT NULL,
        amount HUGEINT NOT NULL)""",
    """CREATE TABLE releases (
        release_id VARCHAR PRIMARY KEY,
        state VARCHAR NOT NULL CHECK (state IN ('reserved', 'settled', 'closed', 'failed')),
        manifest VARCHAR,
        created_at TIMESTAMP NOT NULL,
        updated_at TIMESTAMP NOT NULL,
        mac VARCHAR)""",
)

# Signed contribution of an entry kind to an account's spend.
_SIGN = "CASE e.kind WHEN 'reserve' THEN 1 WHEN 'refund' THEN -1 WHEN 'close' THEN -1 ELSE 0 END"

ACCOUNT_STATE = ("CASE WHEN a.spent > a.cap THEN 'above a lowered cap' "
                 "WHEN a.cap = 0 OR CAST(a.spent AS DOUBLE) >= 0.9 * CAST(a.cap AS DOUBLE) "
                 "THEN 'near cap' ELSE 'ok' END")
"""An account's state: above a lowered cap (admits nothing), near cap (>= 90%), ok."""

VIEWS: tuple[str, ...] = (
    f"""CREATE OR REPLACE VIEW balances AS
    SELECT a.user_id, a.domain, a.stream_id, d.notion,
           CAST(a.cap AS DOUBLE) / {_U} AS cap,
           CAST(a.spent AS DOUBLE) / {_U} AS spent,
           CAST(a.cap - a.spent AS DOUBLE) / {_U} AS remaining,
           d.units_label AS units,
           a.cap AS cap_quanta, a.spent AS spent_quanta,
           {ACCOUNT_STATE} AS state
    FROM accounts a JOIN domains d ON d.domain = a.domain""",  # noqa: S608 - constants only
    f"""CREATE OR REPLACE VIEW release_summary AS
    SELECT e.release_id, r.state, e.domain,
           count(DISTINCT CASE WHEN e.kind = 'reserve' THEN e.user_id END) AS users_admitted,
           count(DISTINCT CASE WHEN e.kind = 'deny' THEN e.user_id END) AS users_denied,
           CAST(sum(CASE WHEN e.kind = 'reserve' THEN e.amount ELSE 0 END) AS DOUBLE) / {_U}
               AS reserved,
           CAST(sum(CASE WHEN e.kind = 'settle' THEN e.amount ELSE 0 END) AS DOUBLE) / {_U}
               AS settled,
           CAST(sum(CASE WHEN e.kind = 'refund' THEN e.amount ELSE 0 END) AS DOUBLE) / {_U}
               AS refunded,
           CAST(sum(CASE WHEN e.kind = 'close' THEN e.amount ELSE 0 END) AS DOUBLE) / {_U}
               AS closed,
           CAST(sum({_SIGN} * e.amount) AS DOUBLE) / {_U} AS net_spent,
           min(e.seq) AS first_seq, max(e.seq) AS last_seq,
           min(e.created_at) AS first_at, max(e.created_at) AS last_at
    FROM entries e LEFT JOIN releases r ON r.release_id = e.release_id
    WHERE e.user_id <> ''
    GROUP BY e.release_id, r.state, e.domain""",  # noqa: S608 - constants only
    f"""CREATE OR REPLACE VIEW denials AS
    SELECT e.seq, e.entry_id, e.created_at, e.release_id, e.user_id, e.domain, e.step,
           e.stream_id, e.notion,
           CAST(e.amount AS DOUBLE) / {_U} AS requested,
           CAST(e.cap - e.balance_after AS DOUBLE) / {_U} AS remaining_before,
           e.reason, e.mechanism, e.actor
    FROM entries e WHERE e.kind = 'deny'""",  # noqa: S608 - constants only
    """CREATE OR REPLACE VIEW near_cap AS SELECT * FROM balances WHERE state = 'near cap'""",
    """CREATE OR REPLACE VIEW above_cap AS
    SELECT * FROM balances WHERE state = 'above a lowered cap'""",
    f"""CREATE OR REPLACE VIEW policy_history AS
    SELECT e.seq, e.entry_id, e.created_at, e.actor, e.domain, e.step AS change,
           CAST(e.cap AS DOUBLE) / {_U} AS cap_before,
           CAST(e.amount AS DOUBLE) / {_U} AS cap_after,
           e.cap AS cap_before_quanta, e.amount AS cap_after_quanta,
           e.reason, e.detail
    FROM entries e WHERE e.kind = 'policy'""",  # noqa: S608 - constants only
    f"""CREATE OR REPLACE VIEW user_history AS
    SELECT e.user_id, e.seq, e.entry_id, e.created_at, e.release_id, e.domain, e.step,
           e.stream_id, e.kind, e.notion,
           CAST(e.amount AS DOUBLE) / {_U} AS amount,
           {_SIGN} * e.amount AS signed_quanta,
           CAST(e.balance_after AS DOUBLE) / {_U} AS balance_after,
           CAST(e.cap AS DOUBLE) / {_U} AS cap,
           d.units_label AS units,
           e.mechanism, e.parameters, e.detail, e.reason, e.actor, e.flow_run_id,
           e.input_fingerprint
    FROM entries e LEFT JOIN domains d ON d.domain = e.domain
    WHERE e.user_id <> ''""",  # noqa: S608 - constants only
)

Migration = Callable[[duckdb.DuckDBPyConnection, bytes], None]


def _v1_to_v2(con: duckdb.DuckDBPyConnection, key: bytes) -> None:
    """Schema v2: keyed MACs on the mutable ``domains`` and ``releases`` rows."""
    con.execute("ALTER TABLE domains ADD COLUMN mac VARCHAR")
    con.execute("ALTER TABLE releases ADD COLUMN mac VARCHAR")
    for (name,) in con.execute("SELECT domain FROM domains").fetchall():
        seal_domain(con, key, name, 2)
    for (rid,) in con.execute("SELECT release_id FROM releases").fetchall():
        seal_release(con, key, rid)


def _v2_to_v3(con: duckdb.DuckDBPyConnection, key: bytes) -> None:
    """Schema v3 (tables): domain definitions and policy seqs, the head signature.

    The rest of the upgrade (signing key, baseline policy entries, resealing)
    is `ledger.migrate`, which runs this inside the same transaction.
    """
    con.execute("ALTER TABLE domains ADD COLUMN definition VARCHAR")
    con.execute("ALTER TABLE domains ADD COLUMN policy_seq BIGINT")
    con.execute("ALTER TABLE chain_head ADD COLUMN signature VARCHAR")


def _v3_to_v4(con: duckdb.DuckDBPyConnection, key: bytes) -> None:
    """Schema v4 (tables): the head counter (`ledger.counter`), under the seal and signature.

    `ledger.migrate` then writes the head (counter 1) with the new seal and signature.
    """
    con.execute("ALTER TABLE chain_head ADD COLUMN counter BIGINT")
    con.execute("UPDATE chain_head SET counter = 0")


MIGRATIONS: dict[int, Migration] = {1: _v1_to_v2, 2: _v2_to_v3, 3: _v3_to_v4}
"""``MIGRATIONS[v]`` upgrades the tables from schema version v to v + 1 (`ledger.migrate`)."""

DOMAIN_MAC_COLUMNS = ("domain", "kind", "notion", "cap", "cap_exact", "w", "time_unit",
                      "value_unit", "units_label")
"""The columns of a domain row the MAC covers (schema 2)."""
DOMAIN_MAC_COLUMNS_V3 = (*DOMAIN_MAC_COLUMNS, "definition", "policy_seq")
"""The columns of a domain row the MAC covers (schema 3: with the definition and policy seq)."""
RELEASE_MAC_COLUMNS = ("release_id", "state", "manifest")


def domain_mac_columns(version: int) -> tuple[str, ...]:
    """The domain columns a MAC covers in a ledger of schema `version`."""
    return DOMAIN_MAC_COLUMNS_V3 if version >= 3 else DOMAIN_MAC_COLUMNS


def domain_mac(key: bytes, row: tuple, version: int = 2) -> str:
    """Keyed MAC of a domains row given as `domain_mac_columns(version)` values."""
    label = "privpipe domain v3" if version >= 3 else "privpipe domain v1"
    return row_mac(key, label, [None if v is None else str(v) for v in row])


def release_mac(key: bytes, row: tuple) -> str:
    """Keyed MAC of a releases row given as `RELEASE_MAC_COLUMNS` values."""
    return row_mac(key, "privpipe release v1", [None if v is None else str(v) for v in row])


def seal_domain(con: duckdb.DuckDBPyConnection, key: bytes, name: str,
                version: int = SCHEMA_VERSION) -> None:
    """Recompute the MAC of one domains row after privpipe changed it."""
    cols = ", ".join(domain_mac_columns(version))
    row = first_row(con.execute(f"SELECT {cols} FROM domains WHERE domain = ?", [name]))  # noqa: S608
    if row is not None:
        con.execute("UPDATE domains SET mac = ? WHERE domain = ?",
                    [domain_mac(key, row, version), name])


def seal_release(con: duckdb.DuckDBPyConnection, key: bytes, release_id: str) -> None:
    """Recompute the MAC of one releases row after privpipe changed it."""
    row = first_row(con.execute(
        "SELECT release_id, state, manifest FROM releases WHERE release_id = ?", [release_id]))
    if row is not None:
        con.execute("UPDATE releases SET mac = ? WHERE release_id = ?",
                    [release_mac(key, row), release_id])


def first_row(cur: duckdb.DuckDBPyConnection) -> tuple | None:
    """First row of a result (or None), consuming the whole result as DuckDB 2 requires."""
    rows = cur.fetchall()
    return rows[0] if rows else None


def create(con: duckdb.DuckDBPyConnection, now: str) -> None:
    """Create every table and view of the current schema version (inside a transaction)."""
    for ddl in TABLES:
        con.execute(ddl)
    for ddl in VIEWS:
        con.execute(ddl)
    con.execute(
        "INSERT INTO schema_version VALUES (?, ?, CAST(? AS TIMESTAMP))",
        [COMPONENT, SCHEMA_VERSION, now],
    )


def stored_version(con: duckdb.DuckDBPyConnection) -> int | None:
    """Schema version of an open database, or None if it is not a privpipe ledger."""
    has = first_row(con.execute(
        "SELECT count(*) FROM information_schema.tables "
        "WHERE table_name = 'schema_version' AND table_schema = 'main'"
    ))
    if not has or not has[0]:
        return None
    try:
        row = first_row(con.execute(
            "SELECT version FROM schema_version WHERE component = ?", [COMPONENT]
        ))
    except duckdb.Error:
        return None
    return int(row[0]) if row else None


def migrate(con: duckdb.DuckDBPyConnection, version: int, now: str, key: bytes) -> list[int]:
    """Apply the migrations from `version` up to `SCHEMA_VERSION`; return the versions applied.

    Raises:
        LookupError: a step of the upgrade path is missing.
    """
    applied = []
    while version < SCHEMA_VERSION:
        step = MIGRATIONS.get(version)
        if step is None:
            raise LookupError(f"no migration from ledger schema version {version}")
        step(con, key)
        version += 1
        con.execute(
            "UPDATE schema_version SET version = ?, migrated_at = CAST(? AS TIMESTAMP) "
            "WHERE component = ?",
            [version, now, COMPONENT],
        )
        applied.append(version)
    if applied:
        for ddl in VIEWS:
            con.execute(ddl)
    return applied
