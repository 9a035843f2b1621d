"""`privpipe ledger migrate`: upgrade an older ledger to this schema, only if it is sound.

A migration is never a side effect of opening or verifying a ledger. It runs,
in one transaction, only after

1. the old-format ledger verifies (chain, seal, balances, the MACs its
   schema has, and everything its signed history requires: a ledger that
   claims an older format than its keys, pin or head counter show is a
   downgrade and is refused, `ledger.verify`), and
2. every domain's cap equals the cap its latest entries were checked against
   (a cap raised with plain SQL in a ledger that has no MACs yet, schema 1,
   would otherwise be sealed as if it were genuine).

Then it creates the tables of the new schema, the Ed25519 signing key, a
``baseline`` policy entry per domain (its whole state, with its full
definition when a policy file describing it is given), reseals every row and
signs the head. The schema version is covered by the seal and the signature
from then on.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import duckdb

from ledger import definitions, history, policy, schema, signing, storage, wevent_budget
from ledger.amounts import cap_units
from ledger.entries import move_head
from ledger.errors import LedgerIntegrityError, LedgerOpenError, PolicyChangeError
from ledger.keyring import Keyring
from ledger.verify import verify_tx
from schemas.policy import Domain, Policy


def _cap_faults(con: duckdb.DuckDBPyConnection) -> str | None:
    """A domain whose cap differs from the cap its latest account entry used, or None."""
    row = schema.first_row(con.execute(
        "WITH l AS (SELECT domain, CAST(cap AS VARCHAR) AS cap, seq FROM entries "
        "WHERE user_id <> '' AND cap IS NOT NULL "
        "QUALIFY row_number() OVER (PARTITION BY domain ORDER BY seq DESC) = 1) "
        "SELECT d.domain, CAST(d.cap AS VARCHAR), l.cap, l.seq FROM domains d JOIN l "
        "ON l.domain = d.domain WHERE CAST(d.cap AS VARCHAR) <> l.cap ORDER BY d.domain "
        "LIMIT 1"))
    if row is None:
        return None
    return (f"domain {row[0]!r} has cap {row[1]} quanta, but its latest entry (seq {row[3]}) "
            f"was checked against cap {row[2]}: the cap was changed outside privpipe")


def _as_charged(row: dict[str, Any], d: Domain, pol_raw: dict[str, Any]) -> Domain:
    """`d` with the w-event budget the old ledger charged, unless the policy states one.

    An older ledger's w-event accounts are per stream (`wevent_budget.LEGACY`):
    a policy that does not say otherwise is recorded that way; one that states
    another budget is refused by `_definition`.
    """
    table = pol_raw.get("domains", {}).get(row["domain"], {})
    if d.kind != "streams" or "wevent_budget" in table:
        return d
    return dataclasses.replace(d, wevent_budget=wevent_budget.of_row(row))


def _definition(row: dict[str, Any], d: Domain | None, source: str) -> dict[str, Any] | None:
    """The full definition for a domain row from the policy, refusing one that disagrees."""
    if d is None:
        return None
    stored = {k: row[k] for k in policy.MEANING if k != "wevent_budget"}
    stored["wevent_budget"] = wevent_budget.of_row(row)
    given = {k: getattr(d, k) for k in policy.MEANING}
    diffs = [k for k in policy.MEANING if stored[k] != given[k]]
    if int(row["cap"]) != cap_units(d.cap):
        diffs.append("cap")
    if diffs:
        raise PolicyChangeError(
            f"policy {source!r} does not describe domain {row['domain']!r} as the ledger has "
            f"it ({', '.join(diffs)} differ); migrate without a policy, or with the policy "
            "the ledger was charged under, then apply changes with `privpipe ledger policy "
            "apply`")
    return policy.state_of(d)["definition"]


def _baselines(con: duckdb.DuckDBPyConnection, key: Keyring, actor: str, now: str,
               pol: Policy | None, old_version: int) -> list[str]:
    lines, changes = [], []
    source = f"migration from schema {old_version}" + (f" with {pol.source}" if pol else "")
    for name, row in sorted(storage.load_domains(con).items()):
        d = pol.domains.get(name) if pol else None
        d = _as_charged(row, d, pol.raw) if d is not None and pol else d
        definition = _definition(row, d, pol.source if pol else "")
        if definition is not None:
            con.execute("UPDATE domains SET definition = ? WHERE domain = ?",
                        [definitions.encode(d), name])
        new = policy.state_of_row(storage.load_domains(con)[name])
        summary = (f"domain {name!r}: baseline at {source}" +
                   ("" if definition else " (fields not stored before schema 3 unknown until "
                                          "a policy is applied)"))
        changes.append((name, "baseline", None, new,
                        {"changed": [], "source": source, "summary": summary,
                         "accounts_above_cap": 0}))
        lines.append(summary)
    policy.record(con, key, actor, now, changes)
    return lines


def migrate_tx(con: duckdb.DuckDBPyConnection, path: Path, key: Keyring, actor: str,
               pol: Policy | None) -> list[str]:
    """Upgrade the ledger in `con`'s transaction (see the module docstring).

    Returns:
        One line per step done (``already at schema N`` when there is nothing to do).

    Raises:
        LedgerIntegrityError: the old ledger does not verify, or a cap differs
            from the one its latest entries used; nothing is changed.
        PolicyChangeError: `pol` describes a domain otherwise than the ledger.
    """
    meta = storage.open_tx(con, path)
    if meta.version >= schema.SCHEMA_VERSION:
        return [f"already at schema {meta.version}: nothing to migrate"]
    noise = key.noise_key
    if meta.version not in schema.MIGRATIONS:
        raise LedgerIntegrityError(
            f"refusing to migrate: the ledger says it is schema {meta.version}, which no "
            "privpipe ever wrote (its schema_version was edited)")
    rep = verify_tx(con, key)  # the rules of the version it claims, the keys and the pin
    if not rep.ok:
        raise LedgerIntegrityError(f"refusing to migrate a ledger that does not verify: "
                                   f"{rep.message}", seq=rep.first_bad_seq)
    fault = _cap_faults(con)
    if fault:
        raise LedgerIntegrityError(f"refusing to migrate: {fault}")
    now = storage.now()
    try:
        schema.migrate(con, meta.version, now, noise)
    except LookupError as err:
        raise LedgerOpenError(f"cannot upgrade {str(path)!r}: {err}") from None
    except duckdb.Error as err:
        raise LedgerIntegrityError(
            f"refusing to migrate: the tables are not those of schema {meta.version} "
            f"({str(err).splitlines()[0]}); its schema_version was edited?") from None
    signer = key.signing or (signing.load_signing_key(path)
                             if signing.signing_key_path(path).exists()
                             else signing.create_signing_key(path))
    public = signing.public_bytes(signer)
    con.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", [
        ["signing_public_key", public.hex()],
        ["signing_key_fingerprint", signing.fingerprint(public)]])
    key = Keyring(noise, signer, public, meta.ledger_id, schema.SCHEMA_VERSION)
    lines = [f"schema {meta.version} -> {schema.SCHEMA_VERSION}: old chain, balances and caps "
             f"verified ({rep.entries_checked} entries)",
             f"signing key {signing.fingerprint(public)[:16]}… (public key "
             f"{signing.public_key_path(path)})"]
    lines += _baselines(con, key, actor, now, pol, meta.version)
    for (rid,) in con.execute("SELECT release_id FROM releases").fetchall():
        schema.seal_release(con, noise, rid)
    move_head(con, key, *storage.head(con))  # seal and sign the head under the new schema
    if history.domain_faults(con):
        raise LedgerIntegrityError("this is a bug: the migrated domains do not match their "
                                   "baseline policy entries")
    return lines
