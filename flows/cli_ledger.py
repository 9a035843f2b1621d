"""`privpipe ledger ...`: create, charge, query, verify, checkpoint, back up and restore the ledger.

Every command takes ``--ledger PATH`` (default ``$PRIVPIPE_HOME/ledger.duckdb``,
else ``./.privpipe/ledger.duckdb``). The read commands (verify, balance,
history, releases, denials, export) also work for an auditor without the
secret keys: with ``--public-key FILE``, or when the noise key is absent, the
ledger is opened read-only and checked with the public key (what needs the
noise key is reported as not checked). Exit codes: 0 ok or admitted, 2 bad
input (including an unreadable, foreign or newer ledger, key problems and a
full disk), 3 denied (prints Requested / Remaining / Difference), 4
integrity failure (also: a schema downgrade, a head restored from an older
state, a signing key that is not the pinned one, and in auditor mode a ledger
not independently verified). See docs/ledger.md.
"""

from __future__ import annotations

import os
import sys
import time
from datetime import datetime
from fractions import Fraction
from pathlib import Path
from typing import Annotated, Any

import typer

from files.release_dir import check_published
from flows.cli_common import OutputFormat, console, handle_errors, print_rows
from ledger import (
    Ledger,
    Request,
    Settlement,
    default_ledger_path,
    format_fraction,
    key_path_for,
)
from ledger.backup import load_snapshot, parse_accept_loss
from ledger.backup import restore as restore_snapshot
from ledger.counter import counter_path
from ledger.errors import LedgerBusyError, LedgerIntegrityError
from ledger.filters import Filter
from ledger.heads import manifest_heads, parse_expect_head
from ledger.recompute import published_faults
from ledger.remote import as_target, open_ledger, parse_url
from ledger.signing import load_pin, pin_path, public_key_path, signing_key_path
from mechanisms.cost import Cost, CostItem, StepRun, WEventCost, exact
from schemas.errors import ParameterError
from schemas.policy import load_policy

ledger_app = typer.Typer(
    name="ledger",
    help=(
        "The audited privacy ledger. Exit codes: 0 ok or admitted; 2 bad input; "
        "3 denied (budget exceeded); 4 integrity failure."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
policy_app = typer.Typer(help="Apply a budget policy to the ledger.", no_args_is_help=True)
ledger_app.add_typer(policy_app, name="policy")

LedgerOpt = Annotated[
    Path | None,
    typer.Option("--ledger", help="Ledger file, or https://HOST:PORT of a `ledger serve` "
                                  "(default: $PRIVPIPE_LEDGER, else "
                                  "$PRIVPIPE_HOME/ledger.duckdb or ./.privpipe/ledger.duckdb)"),
]
FormatOpt = Annotated[OutputFormat, typer.Option("--format", help="Output format.")]
PublicKeyOpt = Annotated[
    Path | None,
    typer.Option("--public-key", help="Auditor mode: open read-only and check signatures with "
                                      "this public key file (no secret key needed)."),
]
ExpectFingerprintOpt = Annotated[
    str | None,
    typer.Option("--expect-fingerprint",
                 help="Auditor mode: the signing key's SHA-256 fingerprint (hex) that "
                      "`ledger init` printed; the ledger must be signed by that key."),
]
ExpectHeadOpt = Annotated[
    list[str] | None,
    typer.Option("--expect-head",
                 help="A head kept earlier: a checkpoint file (`ledger checkpoint`) or "
                      "SEQ:HASH; repeatable. A ledger whose chain does not contain it "
                      "(rolled back, truncated, rewritten or re-keyed) fails."),
]


def _target(ledger: Path | None) -> Path | str:
    """--ledger, else ``$PRIVPIPE_LEDGER``, else the default file; a service URL as a str."""
    if ledger is None:
        ledger = Path(os.environ["PRIVPIPE_LEDGER"]) if os.environ.get(
            "PRIVPIPE_LEDGER") else default_ledger_path()
    return as_target(ledger)


def _path(ledger: Path | None) -> Path:
    """The ledger file of a command that works on the file itself (refuses a service URL)."""
    target = _target(ledger)
    if isinstance(target, str):
        parse_url(target)  # an http:// URL is refused as such
        raise ParameterError(f"this command works on the ledger file and its keys, not on "
                             f"the service {target}; run it on the service's host with "
                             "--ledger PATH")
    return target


def _open(ledger: Path | None) -> Any:
    """The ledger of a command that charges or reads: the file, or the service at a URL."""
    return open_ledger(_target(ledger))


def _reader(ledger: Path | None, public_key: Path | None,
            expect_fingerprint: str | None = None) -> Any:
    """The ledger for a read command: the operator's, or an auditor's (public key only).

    Auditor mode: `public_key` or `expect_fingerprint` given, or no noise key
    beside the ledger.
    """
    target = _target(ledger)
    if isinstance(target, str):
        if public_key is not None or expect_fingerprint is not None:
            raise ParameterError("--public-key and --expect-fingerprint check a ledger file; "
                                 "a service verifies its own file (use --expect-head)")
        return open_ledger(target)
    path = target
    if (public_key is not None or expect_fingerprint is not None
            or (path.exists() and not key_path_for(path).exists())):
        return Ledger.open_auditor(path, public_key=public_key,
                                   expect_fingerprint=expect_fingerprint)
    return Ledger.open(path)


def _amount(x: Any) -> str:
    return "" if x is None else format_fraction(x)


def _parse_amount(text: str, what: str) -> Fraction:
    try:
        value = exact(text)
    except ValueError as err:
        raise ParameterError(f"{what}: {err}") from None
    if value <= 0:
        raise ParameterError(f"{what} must be > 0")
    return value


#: The last step index of a stream (steps are in [0, 2^53): schemas.samples).
MAX_STEP_INDEX = 2**53 - 1


def _check_total(per_step: Fraction, steps: int) -> None:
    """Refuse a charge whose total over its steps the ledger cannot store (exit 2, at once)."""
    from ledger.amounts import MAX_UNITS, charge_units

    if charge_units(per_step) * steps > MAX_UNITS:
        raise ParameterError(
            f"--steps: {steps} steps at ε = {per_step} per step add up to more than the ledger "
            "can store; charge fewer steps")


def _parse_steps(text: str) -> tuple[int, int]:
    try:
        a, b = (int(p) for p in text.split(":"))
    except ValueError:
        raise ParameterError(
            f"--steps must look like START:STOP (integers), got {text!r}") from None
    if not 0 <= a < b:
        raise ParameterError("--steps needs 0 <= START < STOP")
    if b > MAX_STEP_INDEX + 1:
        raise ParameterError(f"--steps: STOP must be at most 2^53 = {MAX_STEP_INDEX + 1} (steps "
                             f"are in [0, 2^53), as in a stream input), got {b}")
    return a, b


@ledger_app.command("init")
@handle_errors
def init(
    ledger: LedgerOpt = None,
    policy: Annotated[Path | None, typer.Option("--policy", help="Apply this policy file.")] = None,
) -> None:
    """Create the ledger and its noise key (or open them if both exist)."""
    led = Ledger.init(_path(ledger))
    console.print(f"ledger: {led.path}\nnoise key: {led.key_path} (mode 0600; back it up)\n"
                  f"signing key: {signing_key_path(led.path)} (mode 0600; back it up)\n"
                  f"head counter: {counter_path(led.path)} (mode 0600; back it up with the "
                  f"keys)\n"
                  f"public key: {public_key_path(led.path)} (give a copy to auditors)\n"
                  f"key fingerprint (SHA-256, pinned in {pin_path(led.path)}): "
                  f"{load_pin(led.path) or 'none yet: run `privpipe ledger migrate`'} "
                  "(auditors keep it: `ledger verify --expect-fingerprint`)",
                  highlight=False, markup=False)
    if policy is not None:
        for line in led.apply_policy(load_policy(policy)) or ["policy: no changes"]:
            console.print(line, highlight=False, markup=False)


@policy_app.command("apply")
@handle_errors
def policy_apply(
    file: Annotated[Path, typer.Argument(help="Policy TOML file.")],
    ledger: LedgerOpt = None,
    reason: Annotated[str, typer.Option(
        "--reason", help="Why the policy changes (recorded in each change's hash-chained "
                         "policy entry, with the OS user as actor; shown by `ledger history` "
                         "and the audit).")] = "",
) -> None:
    """Create or update the ledger's domains from a policy file (idempotent).

    The actor recorded is the OS user running the command (its effective uid),
    not $LOGNAME.
    """
    led = _open(ledger)
    changes = led.apply_policy(load_policy(file), reason=reason)
    for line in changes or ["no changes: the ledger already matches the policy"]:
        console.print(line, highlight=False, markup=False)


def _wevent_charge(dom: dict[str, Any], epsilon: str | None, per_step_text: str | None,
                   rho: str | None, steps: str | None) -> tuple[StepRun, Fraction]:
    """The step run of a w-event charge and its ε per window.

    ``--epsilon`` is ε per window of w steps, as in ``release streams``: each
    step costs ε/w. ``--epsilon-per-step`` states the per-step cost directly
    (what ``--epsilon`` meant for w-event domains before; a window costs w
    times it).
    """
    if rho is not None:
        raise ParameterError("w-event domains are charged with --epsilon (per window of w "
                             "steps) or --epsilon-per-step, not --rho")
    if steps is None:
        raise ParameterError("w-event domains need --steps START:STOP")
    w = int(dom["w"])
    if per_step_text is not None:
        per_step = _parse_amount(per_step_text, "--epsilon-per-step")
    else:
        per_step = _parse_amount(str(epsilon), "--epsilon") / w
    a, b = _parse_steps(steps)
    _check_total(per_step, b - a)
    return StepRun(a, b, per_step), per_step * w


@ledger_app.command("charge")
@handle_errors
def charge(
    user: Annotated[str, typer.Option("--user", help="User id.")],
    domain: Annotated[str, typer.Option("--domain", help="Policy domain.")],
    release: Annotated[str, typer.Option("--release", help="Release id (idempotency key).")],
    epsilon: Annotated[str | None, typer.Option(
        "--epsilon", help="ε (gp); for w-event ε per window of w steps, as in `release "
                          "streams` (each step costs ε/w).")] = None,
    rho: Annotated[str | None, typer.Option("--rho", help="ρ (cgp domains).")] = None,
    epsilon_per_step: Annotated[str | None, typer.Option(
        "--epsilon-per-step", help="w-event only: ε per step (a window of w steps costs w "
                                   "times it; the meaning --epsilon had before).")] = None,
    steps: Annotated[str | None, typer.Option("--steps", help="wevent steps START:STOP.")] = None,
    stream: Annotated[str, typer.Option("--stream", help="wevent stream id.")] = "",
    step: Annotated[str, typer.Option("--step", help="Step name within the release.")] = "release",
    ledger: LedgerOpt = None,
) -> None:
    """Reserve and settle one charge (for operators and tests); exit 3 if denied."""
    if sum(x is not None for x in (epsilon, rho, epsilon_per_step)) != 1:
        raise ParameterError("give exactly one of --epsilon, --rho and --epsilon-per-step")
    led = _open(ledger)
    doms = {d["domain"]: d for d in led.domains()}
    if domain not in doms:
        known = ", ".join(sorted(doms)) or "(none: run `privpipe ledger policy apply`)"
        raise ParameterError(f"unknown domain {domain!r}; the ledger knows: {known}")
    dom = doms[domain]
    if dom["notion"] == "wevent":
        run_, window = _wevent_charge(dom, epsilon, epsilon_per_step, rho, steps)
        runs = (run_,)
        req = Request(user, domain, step=step, notion="wevent", stream_id=stream, runs=runs)
        params: dict[str, Any] = {"epsilon_per_step": str(run_.epsilon),
                                  "steps": [run_.start, run_.stop]}
        what = (f" (ε {format_fraction(window)} per window = {format_fraction(run_.epsilon)} "
                f"per step over steps [{run_.start}, {run_.stop}))")
    else:
        if epsilon_per_step is not None:
            raise ParameterError("--epsilon-per-step only applies to w-event domains")
        if steps is not None or stream:
            raise ParameterError("--steps and --stream only apply to w-event domains")
        notion = "gp" if epsilon is not None else "cgp"
        amount = _parse_amount(epsilon if epsilon is not None else str(rho),
                               "--epsilon" if epsilon is not None else "--rho")
        req = Request(user, domain, step=step, notion=notion, amount=amount)
        params = {"epsilon" if notion == "gp" else "rho": str(amount)}
        what = ""
    result = led.reserve(release, [req], mechanism="manual-charge", parameters=params)
    decision = (result.admitted + result.denied)[0]
    decision.raise_if_denied(release)
    if dom["notion"] == "wevent":
        cost: Cost | WEventCost = WEventCost(epsilon=dom["cap"], w=int(dom["w"]), runs=runs)
    else:
        cost = Cost(notion, amount, (CostItem("charge", notion, amount),))
    led.settle(release, [Settlement(user, domain, step, cost, stream_id=stream)])
    again = " (already recorded for this release: nothing new charged)" if decision.replayed else ""
    console.print(
        f"admitted{again}{what}: user {user!r}, domain {domain!r}, requested "
        f"{format_fraction(decision.requested)}, remaining {format_fraction(decision.remaining)} "
        f"{decision.units}",
        highlight=False, markup=False,
    )


@ledger_app.command("close")
@handle_errors
def close(
    release: Annotated[str, typer.Option("--release", help="Release id.")],
    reason: Annotated[str, typer.Option("--reason", help="Why (recorded in the audit log).")],
    ledger: LedgerOpt = None,
) -> None:
    """Close a release: refund its unsettled reservations with audited entries."""
    led = _open(ledger)
    led.close(release, reason)
    console.print(f"release {release!r} closed", highlight=False, markup=False)


UserFilterOpt = Annotated[str | None, typer.Option("--user", help="Only this user.")]
DomainFilterOpt = Annotated[str | None, typer.Option("--domain", help="Only this domain.")]
ReleaseFilterOpt = Annotated[str | None, typer.Option("--release", help="Only this release.")]
SinceOpt = Annotated[str | None, typer.Option(
    "--since", help="Only from this time on (ISO 8601 date or date-time, UTC unless an "
                    "offset is given; inclusive).")]
UntilOpt = Annotated[str | None, typer.Option(
    "--until", help="Only before this time (ISO 8601, like --since; exclusive).")]


def _json_value(v: Any) -> Any:
    if isinstance(v, datetime):
        return v.isoformat()
    return v


def _emit(rows: list[dict[str, Any]], fmt: OutputFormat, title: str, columns: list[str],
          amounts: tuple[str, ...]) -> None:
    """Print rows; amounts as exact text (table, csv) or, in JSON, a number plus ``*_exact``.

    JSON keys are the snake_case column names; an amount ``x`` is a number
    (float, None when absent) and ``x_exact`` its exact value as a fraction
    string (e.g. ``"1/3"``); times are ISO 8601 text (UTC).
    """
    if fmt is OutputFormat.json:
        out = [{c: _json_value(r.get(c)) for c in columns} for r in rows]
        for r, src in zip(out, rows, strict=True):
            for c in amounts:
                v = src.get(c)
                r[c] = None if v is None else float(v)
                r[f"{c}_exact"] = None if v is None else format_fraction(v)
        cols = [*columns, *(f"{c}_exact" for c in amounts)]
        print_rows(out, fmt, title=title, columns=cols)
        return
    print_rows([{**r, **{c: _amount(r.get(c)) for c in amounts}} for r in rows], fmt,
               title=title, columns=columns)


@ledger_app.command("balance")
@handle_errors
def balance(
    user: UserFilterOpt = None,
    domain: DomainFilterOpt = None,
    ledger: LedgerOpt = None,
    fmt: FormatOpt = OutputFormat.table,
    public_key: PublicKeyOpt = None,
    release: Annotated[str | None, typer.Option(
        "--release", help="Only the accounts this release charged or denied.")] = None,
    since: Annotated[str | None, typer.Option(
        "--since", help="Only accounts with an entry from this time on (ISO 8601; "
                        "inclusive).")] = None,
    until: Annotated[str | None, typer.Option(
        "--until", help="Balances as they stood at this time (ISO 8601; exclusive: "
                        "entries before it).")] = None,
) -> None:
    """Budget per account: cap, spent, remaining (exact, in the cap's unit) and state.

    The state is ok, near cap (90% or more spent) or "above a lowered cap" (a
    policy lowered the cap below what the account had spent: it admits nothing).
    """
    flt = Filter.parse(user=user, domain=domain, release=release, since=since, until=until)
    rows = _reader(ledger, public_key).balances(where=flt)
    _emit(rows, fmt, "balances", [
        "user_id", "domain", "stream_id", "notion", "cap", "spent", "remaining", "unit",
        "units", "state"], ("cap", "spent", "remaining"))


@ledger_app.command("history")
@handle_errors
def history(
    user: Annotated[str | None, typer.Option(
        "--user", help="Only this user (without --user and --release: the policy "
                       "history).")] = None,
    domain: DomainFilterOpt = None,
    ledger: LedgerOpt = None,
    fmt: FormatOpt = OutputFormat.table,
    public_key: PublicKeyOpt = None,
    release: ReleaseFilterOpt = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
) -> None:
    """Account entries (of a user or a release), or without both every policy change, in order.

    Amounts are in the cap's unit: for w-event, ``amount`` is the entry's
    charge per window and ``balance_after`` the account's largest window sum.
    """
    flt = Filter.parse(user=user, domain=domain, release=release, since=since, until=until)
    led = _reader(ledger, public_key)
    if user is None and release is None:
        _emit(led.policy_history(where=flt), fmt, "policy history", [
            "seq", "created_at", "actor", "domain", "change", "cap_before", "cap_after",
            "accounts_above_cap", "reason", "summary"], ("cap_before", "cap_after"))
        return
    title = f"history of {user!r}" if user is not None else f"entries of release {release!r}"
    _emit(led.history(where=flt), fmt, title, [
        "seq", "created_at", "user_id", "release_id", "domain", "step", "stream_id", "kind",
        "notion", "amount", "balance_after", "cap", "unit", "steps", "amount_all_steps",
        "mechanism", "actor", "reason"], ("amount", "balance_after", "cap", "amount_all_steps"))


@ledger_app.command("releases")
@handle_errors
def releases(ledger: LedgerOpt = None, fmt: FormatOpt = OutputFormat.table,
             public_key: PublicKeyOpt = None, user: UserFilterOpt = None,
             domain: DomainFilterOpt = None, release: ReleaseFilterOpt = None,
             since: Annotated[str | None, typer.Option(
                 "--since", help="Only releases created from this time on (ISO 8601; "
                                 "inclusive).")] = None,
             until: Annotated[str | None, typer.Option(
                 "--until", help="Only releases created before this time (ISO 8601; "
                                 "exclusive).")] = None) -> None:
    """Every release and domain: state, users, spent per account (max, mean) and cap, with unit.

    Never a sum over users: ``spent_max`` and ``spent_mean`` are what the
    release charged one account, in the cap's unit (ε, ρ, or ε per window of
    w steps). With --user, that user's charge.
    """
    flt = Filter.parse(user=user, domain=domain, release=release, since=since, until=until)
    rows = _reader(ledger, public_key).releases(flt)
    _emit(rows, fmt, "releases", [
        "release_id", "domain", "state", "users_admitted", "users_denied", "accounts",
        "spent_max", "spent_mean", "cap", "unit", "first_seq", "last_seq", "created_at",
        "updated_at"], ("spent_max", "spent_mean", "cap"))


@ledger_app.command("denials")
@handle_errors
def denials(ledger: LedgerOpt = None, fmt: FormatOpt = OutputFormat.table,
            public_key: PublicKeyOpt = None, user: UserFilterOpt = None,
            domain: DomainFilterOpt = None, release: ReleaseFilterOpt = None,
            since: SinceOpt = None, until: UntilOpt = None) -> None:
    """Every denied request with why: requested, spent, cap (in the cap's unit) and reason."""
    flt = Filter.parse(user=user, domain=domain, release=release, since=since, until=until)
    rows = _reader(ledger, public_key).denials(flt)
    _emit(rows, fmt, "denials", [
        "seq", "created_at", "release_id", "user_id", "domain", "step", "stream_id", "notion",
        "requested", "spent", "cap", "unit", "steps", "cause", "reason"],
        ("requested", "spent", "cap"))


@ledger_app.command("verify")
@handle_errors
def verify(
    ledger: LedgerOpt = None,
    expect_head: ExpectHeadOpt = None,
    manifests: Annotated[Path | None, typer.Option(
        "--manifests", help="A release output directory: every manifest's signed ledger "
                            "head is checked like a checkpoint, every file is hashed against "
                            "its manifest, and every user's charge is recomputed from the "
                            "published files and compared with the ledger.")] = None,
    public_key: PublicKeyOpt = None,
    expect_fingerprint: ExpectFingerprintOpt = None,
) -> None:
    """Recompute the chain, balances, policy history, seal, signature and MACs; exit 4 on a fault.

    Names the first bad entry. Auditor mode: --public-key or --expect-fingerprint
    given, or no noise key beside the ledger; what needs the noise key is listed
    as not checked, and a ledger whose signed head could only be checked with
    the key stored in the ledger itself is "NOT independently verified" (exit 4).
    A ledger that claims an older format than its keys, pin or head counter
    show (a downgrade) fails in every mode. With --manifests, every published
    file must match its manifest's SHA-256 and every user's charge must equal
    the cost recomputed from the published files (exit 4 naming the first).
    """
    expected = [parse_expect_head(str(p)) for p in expect_head or []]
    if manifests is not None:
        expected += manifest_heads(manifests)
    led = _reader(ledger, public_key, expect_fingerprint)
    rep = led.verify_or_raise(expected)
    console.print(rep.message, highlight=False, markup=False)
    if manifests is not None:
        faults = published_faults(led, manifests, check_published)
        if faults:
            raise LedgerIntegrityError(
                f"the published releases disagree with the ledger ({len(faults)} fault(s)); "
                f"first: {faults[0]}")
        console.print(f"published files under {manifests} match their manifests and every "
                      "charge equals the cost recomputed from them", highlight=False,
                      markup=False)


@ledger_app.command("migrate")
@handle_errors
def migrate(
    ledger: LedgerOpt = None,
    policy: Annotated[Path | None, typer.Option(
        "--policy", help="The policy the ledger was charged under: records each domain's "
                         "whole definition.")] = None,
) -> None:
    """Upgrade an older ledger to this schema, only after its chain, balances and caps verify."""
    led = _open(ledger)
    for line in led.migrate(load_policy(policy) if policy is not None else None):
        console.print(line, highlight=False, markup=False)


@ledger_app.command("pubkey")
@handle_errors
def pubkey(ledger: LedgerOpt = None) -> None:
    """Print the ledger's Ed25519 public key (hex) for auditors: ``pubkey > auditor.pub``.

    The key alone goes to stdout; its SHA-256 fingerprint and file to stderr.
    """
    h = Ledger.open(_path(ledger)).head()
    sys.stdout.write(h.public_key + "\n")
    console.print(f"fingerprint (SHA-256): {h.key_fingerprint}; file: "
                  f"{public_key_path(_path(ledger))}", highlight=False, markup=False)


@ledger_app.command("checkpoint")
@handle_errors
def checkpoint(
    out: Annotated[Path, typer.Option("--out", help="New file for the signed head.")],
    ledger: LedgerOpt = None,
) -> None:
    """Write the signed chain head to a new file; an auditor keeps it for `verify --expect-head`."""
    h = _open(ledger).checkpoint(out)
    console.print(f"checkpoint: seq {h.seq}, hash {h.hash}, key {h.key_fingerprint[:16]}… -> "
                  f"{out}", highlight=False, markup=False)


@ledger_app.command("backup")
@handle_errors
def backup(
    out: Annotated[Path, typer.Option("--out", help="New (or empty) directory for the backup.")],
    ledger: LedgerOpt = None,
    include_keys: Annotated[bool, typer.Option(
        "--include-keys", help="Also copy the secret noise and signing keys, the public key "
                               "and the pin (mode 0600). Default: the keys are NOT included; "
                               "keep them in their own backup. Through a service: admin "
                               "role only.")] = False,
    public_key: Annotated[Path | None, typer.Option(
        "--public-key", help="Through a service (--ledger https://...): check the "
                             "snapshot's signatures with this public key file (default: the "
                             "key the snapshot records, pinned to its manifest's "
                             "fingerprint).")] = None,
) -> None:
    """Take a consistent snapshot while releases run, verify it, and write its manifest.

    Also copies the ledger's store of published files (the files its settled
    releases name, each checked against its SHA-256). With --ledger
    https://HOST:PORT the service takes the backup of the ledger it holds and
    streams it (admin or auditor role; --include-keys admin only); it is
    verified again here. Exit 0 when the snapshot verified; 2 bad input
    (--out not empty, keys missing, a role that may not, the service busy);
    4 the snapshot or a published file does not verify (nothing is kept).
    """
    target = _target(ledger)
    if isinstance(target, str):
        from ledger.remote_backup import fetch_backup

        m = fetch_backup(target, out, include_keys=include_keys, public_key=public_key)
    elif public_key is not None:
        raise ParameterError("--public-key checks a backup taken through a service "
                             "(--ledger https://...); a local backup is verified with the "
                             "ledger's own keys")
    else:
        m = Ledger.open(target).backup(out, include_keys=include_keys)
    h = m["head"]
    console.print(f"backup: {m['entries']} entries verified, head seq {h['seq']} hash "
                  f"{h['hash']} (counter {h.get('counter', 0)}), sha256 {m['sha256']}, "
                  f"{len(m.get('published', []))} published files, keys "
                  f"{'included' if include_keys else 'NOT included'} -> {out}",
                  highlight=False, markup=False)


@ledger_app.command("replicate")
@handle_errors
def replicate(
    to: Annotated[Path, typer.Option("--to", help="The replica's directory (new, empty, or "
                                                  "one an earlier replicate made).")],
    ledger: LedgerOpt = None,
    every: Annotated[float, typer.Option(
        "--every", help="Seconds between rounds (with --rounds other than 1).", min=0.0)] = 60.0,
    rounds: Annotated[int, typer.Option(
        "--rounds", help="Rounds to run; 0 runs until stopped.", min=0)] = 1,
) -> None:
    """Keep a read-only replica for auditors: verified snapshots that only move forward.

    Each round snapshots the ledger, verifies it, checks that its chain still
    contains the replica's head, and only then replaces the replica. Auditors
    read REPLICA/ledger.duckdb (with --public-key) and never hold the live
    ledger. Exit 0 when every round replicated; 2 bad input (--to not a
    replica directory); 4 the ledger does not verify, or was rolled back or
    rewritten since the replica's head (the replica is left as it was). A
    round that finds the ledger busy is retried at the next one.
    """
    led = Ledger.open(_path(ledger))
    n = 0
    while rounds == 0 or n < rounds:
        if n:
            time.sleep(every)
        n += 1
        try:
            m = led.replicate(to)
        except LedgerBusyError as err:
            if rounds == 1:
                raise
            console.print(f"round {n}: {err}; retrying at the next round", highlight=False,
                          markup=False)
            continue
        h, prev = m["head"], m["replica"]["previous_head"]
        console.print(f"replica {to}: head seq {h['seq']} hash {h['hash']}, {m['entries']} "
                      f"entries verified (was seq {prev['seq'] if prev else 'none'})",
                      highlight=False, markup=False)


@ledger_app.command("restore")
@handle_errors
def restore(
    snapshot_dir: Annotated[Path, typer.Argument(help="A `ledger backup` directory.")],
    ledger: Annotated[Path, typer.Option("--ledger", help="The ledger file to replace; its "
                                                          "keys must be beside it.")],
    expect_head: ExpectHeadOpt = None,
    accept_loss: Annotated[str | None, typer.Option(
        "--accept-loss", help="SEQ:HASH of the newest head the restore will lose (the "
                              "refusal names it); nothing else is accepted.")] = None,
) -> None:
    """Replace the ledger by a verified snapshot, atomically; refuse to lose newer heads.

    Exit 0 restored; 2 bad input (not a backup directory, keys missing,
    --accept-loss malformed or with nothing to lose); 4 the snapshot does not
    verify, or the ledger, its counter file or an --expect-head is newer than
    the snapshot and --accept-loss does not name the newest head lost. On any
    failure the ledger is left as it was.
    """
    expected = [parse_expect_head(str(p)) for p in expect_head or []]
    accept = parse_accept_loss(accept_loss)
    h = restore_snapshot(load_snapshot(snapshot_dir), ledger, lock_timeout=60.0,
                         expect=expected, accept_loss=accept)
    console.print(f"restored {ledger} from {snapshot_dir}: head seq {h.seq} hash {h.hash} "
                  f"(counter {h.counter}); verified", highlight=False, markup=False)


@ledger_app.command("export")
@handle_errors
def export(
    out: Annotated[Path, typer.Option("--out", help="Output file (a directory with --table "
                                                    "all).")],
    fmt: Annotated[str, typer.Option("--format", help="File format: csv, parquet (plain Parquet "
                                                      "1.0, any DuckDB/pandas reads it) or json.")
                   ] = "csv",
    table: Annotated[str, typer.Option(
        "--table", help="entries, balances, releases, denials, or all (one file per table "
                        "in the --out directory).")] = "entries",
    ledger: LedgerOpt = None,
    public_key: PublicKeyOpt = None,
) -> None:
    """Export a ledger table for auditors (exact amounts as integer quanta)."""
    n = _reader(ledger, public_key).export(out, fmt=fmt, what=table)
    console.print(f"wrote {n} rows to {out}", highlight=False, markup=False)


if __name__ == "__main__":
    ledger_app()
