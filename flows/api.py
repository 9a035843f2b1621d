"""The Python API for notebooks and scripts: ``from flows import release_curves``.

The same path as the CLI: the parameters are checked first (`flows.preflight`:
ε/ρ read as the ledger reads them, `mechanisms.cost.exact`, so ``0.05``,
``"0.05"`` and ``"1/20"`` are one amount and one release id), then the flow runs
against the configured Prefect API, or a temporary server this process starts
once and stops at exit (see `flows.settings` for the PREFECT_HOME rule, which
the CLI follows too). Example (docs/python-api.md, run by a test)::

    from flows import audit, release_curves

    res = release_curves("tracks.csv", domain="tracks", epsilon=0.5,
                         ledger_path="ledger.duckdb", out_dir="out")
    print(res["release_id"], res["manifest"]["counts"])
    print(audit(ledger_path="ledger.duckdb", out_dir="out")["ok"])

A release in which nobody was released raises `ReleaseNotMadeError` (exit code
3 for budget, 2 for rejected input); its ``result`` holds the report and counts.
Errors name this API's keyword arguments (``epsilon must be > 0``), not the
CLI's options (`keyword_errors`). DataFrames go through `privpipe.Session`,
which stages them as files and calls these functions.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from flows import preflight
from flows.settings import privpipe_home
from ledger.remote import as_target, is_url
from mechanisms.cost import exact
from schemas.errors import ParameterError, PrivpipeError
from schemas.names import check_name

_session = contextlib.ExitStack()
atexit.register(_session.close)
_url: str | None = None


def _prefect() -> None:
    """Reach Prefect once per process (the temporary server, if any, lives until exit)."""
    global _url
    if _url is None:
        from flows.prefect_server import prefect_session
        from flows.run_logging import Verbosity, route_run_logs

        _url = _session.enter_context(prefect_session(preload=("prefect.main", "flows.release")))
        route_run_logs(Verbosity.library)  # run logs reach the API; the console as configured


def _ledger(path: str | os.PathLike[str] | None) -> str:
    """The ledger: `path` (a file, or an ``https://`` service URL), else the home's file."""
    if path is not None and is_url(path):
        return str(as_target(path))
    return str(Path(path) if path is not None else privpipe_home() / "ledger.duckdb")


def _abs(path: str | os.PathLike[str] | None) -> str | None:
    """An absolute path for a flow parameter (a rerun from the UI finds the same file).

    A ledger service URL is kept as it is.
    """
    if path is not None and is_url(path):
        return str(as_target(path))
    return None if path is None else str(Path(path).absolute())


def _amount_text(value: Any) -> str | None:
    return None if value is None else str(exact(value))


#: The CLI's options and the keyword arguments of this API that mean the same.
KEYWORDS = {"--epsilon": "epsilon", "--rho": "rho", "--options": "options", "--table": "table",
            "--out": "out_dir", "--policy": "policy_path", "--ledger": "ledger_path",
            "--release-id": "release_id", "--mechanism": "mechanism",
            "--reconstruct": "reconstruct", "--evaluate-on": "evaluate_on",
            "--chunk-users": "chunk_users", "--task-runner": "task_runner"}
_OPTION = re.compile(r"--[a-z][a-z-]*")


def keyword_text(text: str) -> str:
    """`text` with each CLI option of `KEYWORDS` named as the API's keyword argument.

    Code spans (between backticks) are left alone: they quote a command to run.
    """
    parts = text.split("`")
    for i in range(0, len(parts), 2):
        parts[i] = _OPTION.sub(lambda m: KEYWORDS.get(m.group(0), m.group(0)), parts[i])
    return "`".join(parts)


@contextlib.contextmanager
def keyword_errors() -> Iterator[None]:
    """Re-raise a privpipe error with its text naming keyword arguments, not CLI options.

    The checks and the flows share their messages with the CLI (``--epsilon must
    be > 0``); the API's caller passed ``epsilon=``. The error keeps its class,
    exit code and attributes (a `ReleaseNotMadeError` keeps its ``result``).
    """
    try:
        yield
    except PrivpipeError as err:
        if err.args and isinstance(err.args[0], str):
            err.args = (keyword_text(err.args[0]), *err.args[1:])
        raise


def _release_id(value: str | None) -> None:
    """Refuse an unsafe release id before Prefect starts (it names ``OUT/<release_id>/``)."""
    if value is not None:
        check_name(value, "release_id")


def _input_path(value: Any) -> str:
    """The input as a path string; anything else is refused, naming ``input_path``."""
    if isinstance(value, (str, os.PathLike)):
        return str(value)
    raise ParameterError(
        f"input_path must be a path (str or os.PathLike) of a CSV, Parquet or DuckDB file; got "
        f"{type(value).__module__}.{type(value).__qualname__}. For a pandas DataFrame or a "
        "pyarrow Table use privpipe.Session(...).release(data, ...), which validates it as "
        "a file")


def release_curves(input_path: str | os.PathLike[str], *, domain: str,
                   epsilon: float | str | None = None, rho: float | str | None = None,
                   mechanism: str = "privfuncseg", options: dict[str, Any] | None = None,
                   release_id: str | None = None, out_dir: str | os.PathLike[str] = "out",
                   ledger_path: str | os.PathLike[str] | None = None,
                   policy_path: str | os.PathLike[str] | None = None,
                   chunk_users: int | None = None,
                   table: str | None = None, evaluate_on: str = "grid",
                   task_runner: str = "threads", dry_run: bool = False) -> dict[str, Any]:
    """Release every user's curves under ε-GP (or ρ-CGP) w.r.t. L2; charges the ledger.

    Each curve costs ε (or ρ) in the domain's units; a user is admitted only if
    all its curves fit under the cap, and nothing is drawn for denied users.
    Arguments as `flows.release.release_curves`; ε/ρ may be a float, an int or
    a string such as ``"1/3"``.

    `dry_run` only forecasts who would be admitted or denied, at what cost
    (`flows.dry_run`): nothing charged, no noise drawn, nothing written.

    Returns:
        ``release_id``, ``out`` (the release directory), ``report`` (HTML) and
        ``manifest`` (counts, files, fingerprint, parameters); for a dry run
        ``release_id``, ``dry_run``, ``input_fingerprint``, ``counts`` and ``users``.

    Raises:
        BadInputError: a parameter, the policy, the domain, the input path or the
            ledger is wrong (before Prefect starts; nothing charged).
        ReleaseNotMadeError: nobody was released (``.result`` has the report).
    """
    with keyword_errors():
        ledger = _ledger(ledger_path)
        path = _input_path(input_path)
        preflight.check_curves_release(
            input_path=path, domain=domain, mechanism=mechanism, epsilon=epsilon, rho=rho,
            out=out_dir, ledger_path=ledger, policy_path=policy_path, table=table,
            chunk=chunk_users, evaluate_on=evaluate_on, options=options,
            task_runner=task_runner, cli=False)
        _release_id(release_id)
        _prefect()
        from flows.release import release_curves as flow
        from flows.runners import make_task_runner

        return flow.with_options(task_runner=make_task_runner(task_runner))(
            input_path=_abs(path), domain=domain, mechanism=mechanism,
            epsilon=_amount_text(epsilon), rho=_amount_text(rho), options=dict(options or {}),
            release_id=release_id, out_dir=_abs(out_dir), ledger_path=_abs(ledger),
            policy_path=_abs(policy_path), chunk_users=chunk_users, table=table,
            evaluate_on=evaluate_on, dry_run=dry_run)


def release_streams(input_path: str | os.PathLike[str], *, domain: str, epsilon: float | str,
                    mechanism: str = "square_wave", reconstruct: str | None = None,
                    release_id: str | None = None,
                    out_dir: str | os.PathLike[str] = "out",
                    ledger_path: str | os.PathLike[str] | None = None,
                    policy_path: str | os.PathLike[str] | None = None,
                    chunk_users: int | None = None, table: str | None = None,
                    task_runner: str = "threads", dry_run: bool = False) -> dict[str, Any]:
    """Release every user's streams under ε-w-event LDP (Square Wave by default); charges it.

    Each sample costs ε/w (w from the domain), so any w consecutive steps of a
    stream cost at most ε across releases; CPR reconstruction (for Square Wave;
    `reconstruct` defaults to the mechanism's first) is post-processing.

    Returns:
        As `release_curves` (`dry_run` too).

    Raises:
        BadInputError: as `release_curves`.
        ReleaseNotMadeError: nobody was released (``.result`` has the report).
    """
    with keyword_errors():
        ledger = _ledger(ledger_path)
        path = _input_path(input_path)
        reconstruct = preflight.reconstruct_default(mechanism, reconstruct)
        preflight.check_streams_release(
            input_path=path, domain=domain, epsilon=epsilon, out=out_dir, ledger_path=ledger,
            policy_path=policy_path, table=table, chunk=chunk_users, reconstruct=reconstruct,
            mechanism=mechanism, task_runner=task_runner, cli=False)
        _release_id(release_id)
        _prefect()
        from flows.release import release_streams as flow
        from flows.runners import make_task_runner

        return flow.with_options(task_runner=make_task_runner(task_runner))(
            input_path=_abs(path), domain=domain, epsilon=_amount_text(epsilon),
            mechanism=mechanism, reconstruct=reconstruct, release_id=release_id,
            out_dir=_abs(out_dir), ledger_path=_abs(ledger), policy_path=_abs(policy_path),
            chunk_users=chunk_users, table=table, dry_run=dry_run)


def audit(*, ledger_path: str | os.PathLike[str] | None = None,
          out_dir: str | os.PathLike[str] = "out",
          near_cap_fraction: float = 0.1, public_key: str | os.PathLike[str] | None = None,
          expect_heads: Sequence[str | os.PathLike[str]] = (), user: str | None = None,
          domain: str | None = None, release: str | None = None, since: str | None = None,
          until: str | None = None,
          since_checkpoint: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Compliance report of the ledger (balances, near-cap users, denials, verification).

    The CLI's ``privpipe audit`` as a function, with its options as keyword
    arguments: `public_key` audits as an auditor (public key only),
    `expect_heads` are kept heads (checkpoint files or ``SEQ:HASH``) the chain
    must contain, `user`/`domain`/`release`/`since`/`until` narrow the
    listings (never the verification), `since_checkpoint` lists what changed
    after a kept head. Charges nothing. Returns the audit flow's result
    (``ok``, ``report``, ...).

    Raises:
        LedgerOpenError: the ledger path is not an openable ledger (before Prefect starts).
        ParameterError: a filter or a kept head is malformed (before Prefect starts).
    """
    from ledger import Ledger
    from ledger.filters import Filter
    from ledger.heads import parse_expect_head

    where = {k: v for k, v in (("user", user), ("domain", domain), ("release", release),
                               ("since", since), ("until", until)) if v is not None}
    heads = [preflight.abs_head(h) for h in expect_heads]
    kept = None if since_checkpoint is None else preflight.abs_head(since_checkpoint)
    with keyword_errors():
        ledger = _ledger(ledger_path)
        if public_key is None:
            Ledger(ledger)
        Filter.parse(**where)
        for text in [*heads, *([kept] if kept is not None else [])]:
            parse_expect_head(text)
        preflight.out_dir(out_dir)
        _prefect()
        from flows.audit_flow import audit as flow

        return flow(ledger_path=_abs(ledger), out_dir=_abs(out_dir),
                    near_cap_fraction=near_cap_fraction,
                    public_key=None if public_key is None else _abs(public_key),
                    expect_heads=heads, where=where, since_checkpoint=kept)

