"""`Session`: an analyst's front end to privpipe's releases, DataFrames in and out.

A session holds a ledger (a file: DuckDB's in-memory databases cannot carry the
ledger's noise and signing keys, which live in files beside it) and a private
work directory. Without ``ledger_path`` the ledger lives in a temporary work
directory removed when the session closes, with everything it accounted: use it
to try things out, and pass ``ledger_path`` for budgets that must last.

It is a front end, not a second implementation: every release goes through
`flows.api` (the CLI's checks, then the release flow: validation, reservation
before noise, the ledger as the source of truth), and a table argument is first
written to a private Parquet file (`privpipe.inputs`). Errors name the keyword
arguments (``epsilon must be > 0``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from collections.abc import Mapping
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

from files.safe_files import private_dir
from flows import api, preflight
from ledger import Ledger
from privpipe.inputs import input_file
from privpipe.results import DryRun, Release, forecast, published
from schemas.errors import ParameterError
from schemas.policy import Policy, load_policy, parse_policy

if TYPE_CHECKING:
    import pandas as pd

BUDGET_COLUMNS = ("user_id", "stream_id", "notion", "cap", "spent", "remaining", "units",
                  "state")
_CURVES_ONLY = ("rho", "options", "evaluate_on")
_STREAMS_ONLY = ("reconstruct",)


def _policy(policy: Any) -> Policy:
    """`policy` (a dict with the TOML policy's keys, a `Policy` or a TOML path) validated."""
    if isinstance(policy, Policy):
        return policy
    if isinstance(policy, Mapping):
        return parse_policy(dict(policy), source="policy")
    if isinstance(policy, (str, os.PathLike)):
        return load_policy(policy)
    raise ParameterError(
        "policy must be a dict with the policy file's keys ({'domains': {NAME: {...}}}), a "
        f"schemas.policy.Policy or the path of a policy TOML file; got {type(policy).__name__}")


class Session:
    """A ledger, an inline policy and DataFrame releases, as in a notebook.

    Example (docs/python-api.md, run by a test)::

        with privpipe.Session(policy={"domains": {...}}) as session:
            rel = session.release(df, domain="tracks", epsilon=0.5)
            rel["values"]                      # a pandas DataFrame of the released curves
            session.remaining_budget(domain="tracks")

    Args:
        policy: the domains to define or update in the ledger: a dict with the keys
            of a policy TOML file (parsed by `schemas.policy.parse_policy`), a
            `Policy`, or a TOML path; None keeps the ledger's domains.
        ledger_path: the ledger file, created if missing (its keys beside it);
            default a temporary one in `work_dir`.
        work_dir: private directory (0700) for the ledger, the staged tables and
            the published releases (``work_dir/out``); default a temporary one,
            removed by `close`.
        task_runner: as the CLI's ``--task-runner`` (threads by default).

    Raises:
        PolicyError: the policy is invalid (each key named, e.g. ``domains.ecg.cap``).
        ParameterError / LedgerOpenError: an argument or the ledger is wrong.
    """

    def __init__(self, policy: Mapping[str, Any] | Policy | str | os.PathLike[str] | None = None,
                 *, ledger_path: str | os.PathLike[str] | None = None,
                 work_dir: str | os.PathLike[str] | None = None,
                 task_runner: str = "threads") -> None:
        temporary = work_dir is None
        self.work_dir = (Path(tempfile.mkdtemp(prefix="privpipe-session-")) if temporary
                         else private_dir(work_dir))
        self._cleanup = (weakref.finalize(self, shutil.rmtree, self.work_dir, True)
                         if temporary else None)
        try:
            with api.keyword_errors():
                preflight.task_runner_spec(task_runner)
                self.ledger = Ledger.init(Path(ledger_path) if ledger_path is not None
                                          else self.work_dir / "ledger.duckdb")
                if policy is not None:
                    self.ledger.apply_policy(_policy(policy))
        except BaseException:
            self.close()
            raise
        self.task_runner = task_runner
        self.out_dir = self.work_dir / "out"

    def __repr__(self) -> str:
        return f"Session(ledger={str(self.ledger.path)!r}, work_dir={str(self.work_dir)!r})"

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Remove a temporary work directory (its ledger and releases); a given one is kept.

        Tables of releases already returned stay usable (they are in memory).
        """
        if self._cleanup is not None:
            self._cleanup()

    def release(self, data: Any, *, domain: str, epsilon: float | str | None = None,
                rho: float | str | None = None, mechanism: str | None = None,
                options: dict[str, Any] | None = None, release_id: str | None = None,
                table: str | None = None, evaluate_on: str | None = None,
                reconstruct: str | None = None) -> Release:
        """Release `data` in `domain`, charging the ledger; the domain's kind decides how.

        Curves (ε-GP or ρ-CGP per curve): `epsilon` or `rho`, `mechanism` (default
        ``privfuncseg``), `options`, `evaluate_on`. Streams (ε per window of w
        steps): `epsilon`, `mechanism` (default ``square_wave``), `reconstruct`.

        Args:
            data: a pandas DataFrame, a pyarrow Table, or the path of a CSV,
                Parquet or DuckDB file (`table` names a DuckDB file's table), with
                the domain's columns (user_id, curve_id or stream_id, t, values).
            domain: the ledger domain charged.
            epsilon: ε (a float, an int or a ratio string such as ``"1/3"``).
            rho: ρ per curve (CGP curve domains), instead of `epsilon`.
            mechanism: a registered mechanism of the domain's kind and metric.
            options: the mechanism's options (curves), e.g. ``{"basis": "sinc"}``.
            release_id: rerun key; default derived from the data's fingerprint and
                the parameters (the same call again is the same release: nothing
                more is charged).
            table: the table of a DuckDB file given as `data`.
            evaluate_on: ``grid`` (default) or ``input`` (curves).
            reconstruct: ``cpr`` or ``none`` (streams; default the mechanism's first).

        Returns:
            The published `Release`: its tables (``rel["values"]``), id, manifest,
            report and warnings.

        Raises:
            BadInputError: a bad argument or input, named by keyword (nothing charged).
            ReleaseNotMadeError: nobody was released (``.result`` has the report).
        """
        return published(self._run(data, False, domain=domain, epsilon=epsilon, rho=rho,
                                   mechanism=mechanism, options=options,
                                   release_id=release_id, table=table,
                                   evaluate_on=evaluate_on, reconstruct=reconstruct))

    def dry_run(self, data: Any, *, domain: str, epsilon: float | str | None = None,
                rho: float | str | None = None, mechanism: str | None = None,
                options: dict[str, Any] | None = None, release_id: str | None = None,
                table: str | None = None, evaluate_on: str | None = None,
                reconstruct: str | None = None) -> DryRun:
        """Who `release` with these arguments would admit or deny now, and at what cost.

        The data is validated and staged as for a release; the ledger decides as
        its reservation would, writing nothing: no charge, no noise, no output.
        Arguments as `release`.
        """
        return forecast(self._run(data, True, domain=domain, epsilon=epsilon, rho=rho,
                                  mechanism=mechanism, options=options, release_id=release_id,
                                  table=table, evaluate_on=evaluate_on,
                                  reconstruct=reconstruct))

    def _run(self, data: Any, dry_run: bool, *, domain: str, table: str | None,
             **given: Any) -> dict[str, Any]:
        """Stage `data`, then run the release of the domain's kind through `flows.api`."""
        with api.keyword_errors():
            kind = self.ledger.domain(domain).kind
        arguments = _kind_arguments(kind, domain, given)
        fn = api.release_curves if kind == "curves" else api.release_streams
        with input_file(data, self.work_dir, table) as path:
            return fn(path, domain=domain, ledger_path=self.ledger.path, out_dir=self.out_dir,
                      table=table, task_runner=self.task_runner, dry_run=dry_run, **arguments)

    def remaining_budget(self, user: str | None = None, *,
                         domain: str) -> Fraction | pd.DataFrame:
        """What is left in `domain`: one user's budget, or every account's as a DataFrame.

        Args:
            user: a user id: the least remaining over its accounts in the domain
                (its cap if it has none yet; 0 above a lowered cap), an exact
                `Fraction` in the domain's units. None: every account.
            domain: the ledger domain.

        Returns:
            A `Fraction`, or a DataFrame with `BUDGET_COLUMNS` (exact Fractions).
        """
        import pandas as pd

        with api.keyword_errors():
            dom = self.ledger.domain(domain)
        if user is not None and not isinstance(user, str):
            raise ParameterError(f"user must be a user id (str); got {type(user).__name__}")
        rows = self.ledger.balances(domain)
        if user is None:
            return pd.DataFrame(rows, columns=list(BUDGET_COLUMNS))
        mine = [r["remaining"] for r in rows if r["user_id"] == user]
        return max(Fraction(0), min(mine)) if mine else dom.cap


def _kind_arguments(kind: str, domain: str, given: dict[str, Any]) -> dict[str, Any]:
    """The `flows.api` keyword arguments of a `kind` release; others are refused by name."""
    other, mine = ((_STREAMS_ONLY, "stream") if kind == "curves" else (_CURVES_ONLY, "curve"))
    wrong = [name for name in other if given.get(name) is not None]
    if wrong:
        raise ParameterError(
            f"{' and '.join(wrong)} appl{'ies' if len(wrong) == 1 else 'y'} to {mine} domains "
            f"only; domain {domain!r} holds {kind}")
    out = {k: v for k, v in given.items() if v is not None and k not in other}
    if kind == "streams" and "epsilon" not in out:
        raise ParameterError(f"epsilon is required: ε per window of w steps of domain {domain!r}")
    return out
