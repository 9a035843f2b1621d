"""`privpipe ledger ...`: create, charge, query, verify and export the privacy ledger.

Every command takes ``--ledger PATH`` (default ``$PRIVPIPE_HOME/ledger.duckdb``,
else ``./.privpipe/ledger.duckdb``). Exit codes: 0 ok or admitted, 2 bad input
(including an unreadable, foreign or newer ledger and noise-key problems),
3 denied (prints Requested / Remaining / Difference), 4 integrity failure.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Annotated, Any

import typer

from flows.cli_common import OutputFormat, console, handle_errors, print_rows
from ledger import (
    Ledger,
    Request,
    Settlement,
    default_ledger_path,
    format_fraction,
)
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
    typer.Option("--ledger", help="Ledger file (default: $PRIVPIPE_HOME/ledger.duckdb "
                                  "or ./.privpipe/ledger.duckdb)"),
]
FormatOpt = Annotated[OutputFormat, typer.Option("--format", help="Output format.")]


def _path(ledger: Path | None) -> Path:
    return ledger if ledger is not None else default_ledger_path()


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


def _parse_steps(text: str) -> tuple[int, int]:
    try:
        a, b = (int(p) for p in text.split(":"))
    except ValueError:
        raise ParameterError(
            f"--steps must look like START:STOP (integers), got {text!r}") from None
    if not 0 <= a < b:
        raise ParameterError("--steps needs 0 <= START < STOP")
    return a, b


@ledger_app.command("init")
@handle_errors
def init(
    ledger: LedgerOpt = None,
    policy: Annotated[Path | None, typer.Option("--policy", help="Apply this policy file.")] = None,
) -> None:
    """Create the ledger and its noise key (or open them if both exist)."""
    led = Ledger.init(_path(ledger))
    console.print(f"ledger: {led.path}\nnoise key: {led.key_path} (mode 0600; back it up)",
                  highlight=False, markup=False)
    if policy is not None:
        for line in led.apply_policy(load_policy(policy)) or ["policy: no changes"]:
            console.print(line, highlight=False, markup=False)


@policy_app.command("apply")
@handle_errors
def policy_apply(
    file: Annotated[Path, typer.Argument(help="Policy TOML file.")],
    ledger: LedgerOpt = None,
) -> None:
    """Create or update the ledger's domains from a policy file (idempotent)."""
    led = Ledger.open(_path(ledger))
    changes = led.apply_policy(load_policy(file))
    for line in changes or ["no changes: the ledger already matches the policy"]:
        console.print(line, highlight=False, markup=False)


@ledger_app.command("charge")
@handle_errors
def charge(
    user: Annotated[str, typer.Option("--user", help="User id.")],
    domain: Annotated[str, typer.Option("--domain", help="Policy domain.")],
    release: Annotated[str, typer.Option("--release", help="Release id (idempotency key).")],
    epsilon: Annotated[
        str | None, typer.Option("--epsilon", help="ε (per step for wevent).")] = None,
    rho: Annotated[str | None, typer.Option("--rho", help="ρ (cgp domains).")] = None,
    steps: Annotated[str | None, typer.Option("--steps", help="wevent steps START:STOP.")] = None,
    stream: Annotated[str, typer.Option("--stream", help="wevent stream id.")] = "",
    step: Annotated[str, typer.Option("--step", help="Step name within the release.")] = "release",
    ledger: LedgerOpt = None,
) -> None:
    """Reserve and settle one charge (for operators and tests); exit 3 if denied."""
    if (epsilon is None) == (rho is None):
        raise ParameterError("give exactly one of --epsilon and --rho")
    led = Ledger.open(_path(ledger))
    doms = {d["domain"]: d for d in led.domains()}
    if domain not in doms:
        known = ", ".join(sorted(doms)) or "(none: run `privpipe ledger policy apply`)"
        raise ParameterError(f"unknown domain {domain!r}; the ledger knows: {known}")
    dom = doms[domain]
    notion = "gp" if epsilon is not None else "cgp"
    amount = _parse_amount(epsilon if epsilon is not None else str(rho),
                           "--epsilon" if epsilon is not None else "--rho")
    if dom["notion"] == "wevent":
        if rho is not None:
            raise ParameterError("w-event domains are charged with --epsilon per step")
        if steps is None:
            raise ParameterError("w-event domains need --steps START:STOP")
        a, b = _parse_steps(steps)
        runs = (StepRun(a, b, amount),)
        req = Request(user, domain, step=step, notion="wevent", stream_id=stream, runs=runs)
        params: dict[str, Any] = {"epsilon_per_step": str(amount), "steps": [a, b]}
    else:
        if steps is not None or stream:
            raise ParameterError("--steps and --stream only apply to w-event domains")
        req = Request(user, domain, step=step, notion=notion, amount=amount)
        params = {"epsilon" if notion == "gp" else "rho": str(amount)}
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
        f"admitted{again}: user {user!r}, domain {domain!r}, requested "
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
    led = Ledger.open(_path(ledger))
    led.close(release, reason)
    console.print(f"release {release!r} closed", highlight=False, markup=False)


@ledger_app.command("balance")
@handle_errors
def balance(
    user: Annotated[str | None, typer.Option("--user", help="Only this user.")] = None,
    domain: Annotated[str | None, typer.Option("--domain", help="Only this domain.")] = None,
    ledger: LedgerOpt = None,
    fmt: FormatOpt = OutputFormat.table,
) -> None:
    """Budget per account: cap, spent, remaining (exact), with units."""
    rows = [r for r in Ledger.open(_path(ledger)).balances(domain)
            if user is None or r["user_id"] == user]
    out = [{**r, "cap": _amount(r["cap"]), "spent": _amount(r["spent"]),
            "remaining": _amount(r["remaining"])} for r in rows]
    print_rows(out, fmt, title="balances", columns=[
        "user_id", "domain", "stream_id", "notion", "cap", "spent", "remaining", "units"])


@ledger_app.command("history")
@handle_errors
def history(
    user: Annotated[str, typer.Option("--user", help="User id.")],
    domain: Annotated[str | None, typer.Option("--domain", help="Only this domain.")] = None,
    ledger: LedgerOpt = None,
    fmt: FormatOpt = OutputFormat.table,
) -> None:
    """Every ledger entry of one user, in order."""
    rows = Ledger.open(_path(ledger)).history(user, domain)
    out = [{**r, "amount": _amount(r["amount"]), "balance_after": _amount(r["balance_after"]),
            "cap": _amount(r["cap"])} for r in rows]
    print_rows(out, fmt, title=f"history of {user!r}", columns=[
        "seq", "created_at", "release_id", "domain", "step", "stream_id", "kind", "notion",
        "amount", "balance_after", "cap", "mechanism", "reason"])


@ledger_app.command("releases")
@handle_errors
def releases(ledger: LedgerOpt = None, fmt: FormatOpt = OutputFormat.table) -> None:
    """Every release with its state, admitted/denied users and net spend."""
    rows = Ledger.open(_path(ledger)).releases()
    out = [{**r, "net_spent": _amount(r["net_spent"])} for r in rows]
    print_rows(out, fmt, title="releases", columns=[
        "release_id", "state", "users_admitted", "users_denied", "net_spent", "first_seq",
        "last_seq", "created_at", "updated_at"])


@ledger_app.command("denials")
@handle_errors
def denials(ledger: LedgerOpt = None, fmt: FormatOpt = OutputFormat.table) -> None:
    """Every denied request with the reason."""
    rows = Ledger.open(_path(ledger)).denials()
    out = [{**r, "requested": _amount(r["requested"])} for r in rows]
    print_rows(out, fmt, title="denials", columns=[
        "seq", "created_at", "release_id", "user_id", "domain", "step", "stream_id", "notion",
        "requested", "reason"])


@ledger_app.command("verify")
@handle_errors
def verify(ledger: LedgerOpt = None) -> None:
    """Recompute the hash chain and every balance; exit 4 naming the first bad entry."""
    rep = Ledger.open(_path(ledger)).verify_or_raise()
    console.print(rep.message, highlight=False, markup=False)


@ledger_app.command("export")
@handle_errors
def export(
    out: Annotated[Path, typer.Option("--out", help="Output file.")],
    fmt: Annotated[str, typer.Option("--format", help="File format: csv, parquet or json.")
                   ] = "csv",
    table: Annotated[str, typer.Option(
        "--table", help="entries, balances, releases or denials.")] = "entries",
    ledger: LedgerOpt = None,
) -> None:
    """Export a ledger table for auditors (exact amounts as integer quanta)."""
    n = Ledger.open(_path(ledger)).export(out, fmt=fmt, what=table)
    console.print(f"wrote {n} rows to {out}", highlight=False, markup=False)


if __name__ == "__main__":
    ledger_app()
