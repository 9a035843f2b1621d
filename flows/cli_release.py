"""`privpipe release curves|streams`, `audit`, `evaluate`, `demo`, `serve`.

A release is checked (arguments, policy, domain, input path, ledger and its
key: `flows.preflight`) before Prefect is imported or started, so a mistake is
reported in about a second. Prefect is then reached through
`cli_common.open_prefect`: the configured API, else a temporary server that
dies with the command.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import typer
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from flows import preflight
from flows.cli_common import (
    FORMAT_HELP,
    QUIET_HELP,
    VERBOSE_HELP,
    OutputFormat,
    console,
    handle_errors,
    open_prefect,
    print_error,
    print_rows,
    verbosity,
)
from flows.outcome import ReleaseNotMadeError, counts_line
from flows.run_logging import Verbosity
from flows.settings import privpipe_home
from ledger.remote import as_target, is_url, parse_url
from reports.release_sections import WITHHELD
from schemas.errors import EXIT_BAD_INPUT, EXIT_DENIED, ParameterError
from schemas.names import check_name

release_app = typer.Typer(help="Release a data set under local privacy (charges the ledger).",
                          no_args_is_help=True)

LedgerOpt = typer.Option(None, "--ledger", help="Ledger file (default: $PRIVPIPE_HOME/"
                         "ledger.duckdb, else ./.privpipe/ledger.duckdb).")
PolicyOpt = typer.Option(None, "--policy", help="Policy TOML (default: the bundled "
                         "data/policy.toml).")
CrossCheckPolicyOpt = typer.Option(
    None, "--policy", help="Optional cross-check: refuse the release if this policy file "
    "disagrees with the ledger's domain. The release always charges the ledger's domain "
    "definition (apply policy changes with `privpipe ledger policy apply`).")
OutOpt = typer.Option(Path("out"), "--out", help="Output directory; each release writes "
                      "OUT/<release_id>/.")
RunnerOpt = typer.Option("threads", "--task-runner",
                         help="threads | processes | dask (local cluster) | tcp://HOST:PORT "
                              "or tls://HOST:PORT (Dask scheduler; TLS from the Dask "
                              "configuration) | ray://HOST:PORT (needs prefect-ray); Dask and "
                              "Ray workers must be trusted | privpipe+https://HOST:PORT[,...] "
                              "(`privpipe worker serve` workers, no pickle; docs/scale.md). "
                              "Remote results are re-executed on a sample: "
                              "PRIVPIPE_RECHECK_RATE.")
VerboseOpt = typer.Option(False, "--verbose", "-v", help=VERBOSE_HELP)
QuietOpt = typer.Option(False, "--quiet", "-q", help=QUIET_HELP)
TableOpt = typer.Option(None, "--table", help="Table name for a DuckDB input.")
ChunkUsersOpt = typer.Option(
    None, "--chunk-users", help="Users per mechanism task (default: 1,000; a "
                                "fixed count, never sized by samples).")
FormatOpt = typer.Option(OutputFormat.table, "--format", help=FORMAT_HELP)
DryRunOpt = typer.Option(False, "--dry-run", help="Validate and show who would be admitted or "
                         "denied, each user's cost and the budget left after; charge nothing, "
                         "draw no noise, write nothing (exit 3 if nobody would be admitted).")

RESULT_COLUMNS = ("release_id", "released", "denied", "rejected", "users", "fingerprint",
                  "output", "report")


def _ledger_path(ledger: Path | None) -> Any:
    """--ledger, else ``$PRIVPIPE_LEDGER``, else the home's ledger; a service URL as a str."""
    if ledger is None:
        env = os.environ.get("PRIVPIPE_LEDGER")
        ledger = Path(env) if env else privpipe_home() / "ledger.duckdb"
    target = as_target(ledger)
    if isinstance(target, str):
        parse_url(target)  # http:// is refused before anything runs
    return target


def _prepare(mode: Verbosity, preload: tuple[str, ...] = ()) -> None:
    open_prefect(mode, preload)


def _abs(path: Path | None) -> str | None:
    """A path as an absolute string (flow parameters: a rerun elsewhere finds the same file)."""
    if path is not None and is_url(path):
        return str(as_target(path))
    return None if path is None else str(Path(path).absolute())


def _result_row(res: dict[str, Any]) -> dict[str, Any]:
    manifest = res["manifest"]
    counts = manifest["counts"]
    return {"release_id": res["release_id"], "released": counts["users_released"],
            "denied": counts["users_denied"],
            # withheld from the manifest unless the policy declares public.rejections
            "rejected": counts.get("users_rejected", WITHHELD),
            "users": counts.get("users_in_input", WITHHELD),
            "fingerprint": manifest["input_fingerprint"],
            "output": res["out"], "report": res["report"]}


TRUSTED_ONLY = ("tcp://", "tls://", "ray://")
TRUSTED_ONLY_WARNING = (
    "Dask and Ray carry results as pickles, which this process unpickles: their workers must "
    "be trusted not to run code here (where the ledger's noise key is). For workers you do "
    "not trust, use `privpipe worker serve` and --task-runner privpipe+https://HOST:PORT "
    "(SECURITY.md, docs/scale.md)")


def _run_release(flow_name: str, task_runner: str, fmt: OutputFormat, mode: Verbosity,
                 **params: Any) -> None:
    """Start Prefect, run the flow, print the result; exit 3/2 when nobody was released."""
    _prepare(mode, ("flows.release", "flows.runners"))
    import flows.release
    from flows.runners import make_task_runner

    if task_runner.startswith(TRUSTED_ONLY):
        print_error(TRUSTED_ONLY_WARNING, label="warning:")
    flow = getattr(flows.release, flow_name)
    runner = make_task_runner(task_runner)
    try:
        with _spinner(f"{flow_name.replace('_', ' ')} (Prefect: {os.environ['PREFECT_API_URL']})",
                      mode):
            res = flow.with_options(task_runner=runner)(**params)
    except ReleaseNotMadeError as err:
        print_rows([_result_row(err.result)], fmt, title="Release (nobody released)",
                   columns=RESULT_COLUMNS)
        raise
    if res.get("dry_run"):
        _show_plan(res, fmt, mode)
        return
    print_rows([_result_row(res)], fmt, title="Release", columns=RESULT_COLUMNS)
    if mode is not Verbosity.quiet:
        counts = res["manifest"]["counts"]
        console.print(f"release {res['release_id']}: {counts_line(counts)}", highlight=False)


def _show_plan(res: dict[str, Any], fmt: OutputFormat, mode: Verbosity) -> None:
    """A dry run's table; exit 3 if nobody would be admitted (2 if nobody is valid)."""
    from flows.dry_run import PLAN_COLUMNS

    counts = res["counts"]
    print_rows(res["users"], fmt, title=f"Dry run of {res['release_id']} (nothing charged)",
               columns=PLAN_COLUMNS)
    if mode is not Verbosity.quiet:
        console.print(f"dry run of {res['release_id']}: "
                      f"{counts_line(counts).replace(' released;', ' would be released;')}; "
                      "nothing charged, no noise drawn", highlight=False)
    if counts["users_released"] == 0:
        raise typer.Exit(EXIT_DENIED if counts["users_denied"] else EXIT_BAD_INPUT)


@release_app.command("curves")
@handle_errors
def release_curves_cmd(
    input_path: Path = typer.Argument(..., help="CSV, Parquet or DuckDB file of curve samples."),
    domain: str = typer.Option(..., "--domain", help="Ledger domain (kind curves)."),
    mechanism: str = typer.Option("privfuncseg", "--mechanism",
                                  help=" | ".join(preflight.CURVE_MECHANISMS) + " (the "
                                       "mechanism's metric must be the domain's)"),
    epsilon: str | None = typer.Option(None, "--epsilon",
                                       help="ε per curve (GP), e.g. 0.5 or 1/3."),
    rho: str | None = typer.Option(None, "--rho", help="ρ per curve (CGP domains only)."),
    options: str | None = typer.Option(None, "--options",
                                       help="Mechanism options as JSON, e.g. "
                                            "'{\"basis\": \"sinc\", \"m\": 200}'."),
    release_id: str | None = typer.Option(None, "--release-id",
                                          help="Rerun key (default: derived from flow, domain, "
                                               "input fingerprint and parameters)."),
    table: str | None = TableOpt, chunk_users: int | None = ChunkUsersOpt,
    evaluate_on: str = typer.Option("grid", "--evaluate-on",
                                    help="grid (N evenly spaced times) | input (the input "
                                         "times: releases them as-is)."),
    out: Path = OutOpt, ledger: Path | None = LedgerOpt,
    policy: Path | None = CrossCheckPolicyOpt,
    task_runner: str = RunnerOpt, dry_run: bool = DryRunOpt, fmt: OutputFormat = FormatOpt,
    verbose: bool = VerboseOpt, quiet: bool = QuietOpt,
) -> None:
    """Privatize every user's curves (ε-GP or ρ-CGP w.r.t. L2) and write OUT/<release_id>/.

    Exit 0 when some user was released (denied and rejected users are counted),
    3 when no user was released because of budget, 2 on bad input.
    """
    mode = verbosity(verbose, quiet)
    if release_id is not None:
        check_name(release_id, "--release-id")  # it names OUT/<release_id>/
    opts = preflight.parse_options(options)
    ledger_path = _ledger_path(ledger)
    preflight.check_curves_release(
        input_path=input_path, domain=domain, mechanism=mechanism, epsilon=epsilon, rho=rho,
        out=out, ledger_path=ledger_path, policy_path=policy, table=table, chunk=chunk_users,
        evaluate_on=evaluate_on, options=opts, task_runner=task_runner)
    _run_release(
        "release_curves", task_runner, fmt, mode, input_path=_abs(input_path), domain=domain,
        mechanism=mechanism, epsilon=epsilon, rho=rho, options=opts, release_id=release_id,
        out_dir=_abs(out), ledger_path=_abs(ledger_path), policy_path=_abs(policy),
        chunk_users=chunk_users, table=table, evaluate_on=evaluate_on, dry_run=dry_run)


@release_app.command("streams")
@handle_errors
def release_streams_cmd(
    input_path: Path = typer.Argument(..., help="CSV, Parquet or DuckDB file of stream samples."),
    domain: str = typer.Option(..., "--domain", help="Ledger domain (kind streams)."),
    epsilon: str = typer.Option(..., "--epsilon", help="ε per window of w steps (w-event)."),
    mechanism: str = typer.Option("square_wave", "--mechanism",
                                  help=" | ".join(preflight.STREAM_MECHANISMS) + " (a per-step "
                                  "randomizer at ε/w)"),
    reconstruct: str | None = typer.Option(
        None, "--reconstruct", help="cpr | none (default: the mechanism's first: cpr for "
                                    "square_wave)"),
    release_id: str | None = typer.Option(None, "--release-id", help="Rerun key."),
    table: str | None = TableOpt, chunk_users: int | None = ChunkUsersOpt,
    population_period: int | None = typer.Option(
        None, "--population-period", help="Public period in steps (e.g. 48 half-hours) of the "
        "population view's per-phase tables; post-processing, charges nothing."),
    out: Path = OutOpt, ledger: Path | None = LedgerOpt,
    policy: Path | None = CrossCheckPolicyOpt,
    task_runner: str = RunnerOpt, dry_run: bool = DryRunOpt, fmt: OutputFormat = FormatOpt,
    verbose: bool = VerboseOpt, quiet: bool = QuietOpt,
) -> None:
    """Randomize every stream sample at ε/w (ε-w-event LDP; Square Wave by default), CPR after.

    Exit 0 when some user was released (denied and rejected users are counted),
    3 when no user was released because of budget, 2 on bad input.
    """
    mode = verbosity(verbose, quiet)
    if release_id is not None:
        check_name(release_id, "--release-id")  # it names OUT/<release_id>/
    ledger_path = _ledger_path(ledger)
    reconstruct = preflight.reconstruct_default(mechanism, reconstruct)
    preflight.check_streams_release(
        input_path=input_path, domain=domain, epsilon=epsilon, out=out, ledger_path=ledger_path,
        policy_path=policy, table=table, chunk=chunk_users, reconstruct=reconstruct,
        mechanism=mechanism, task_runner=task_runner)
    _run_release(
        "release_streams", task_runner, fmt, mode, input_path=_abs(input_path), domain=domain,
        epsilon=epsilon, mechanism=mechanism, reconstruct=reconstruct, release_id=release_id,
        out_dir=_abs(out), ledger_path=_abs(ledger_path), policy_path=_abs(policy),
        chunk_users=chunk_users, table=table, population_period=population_period,
        dry_run=dry_run)


class _spinner:
    """A transient spinner on stderr, only at the default verbosity (log lines or quiet: none)."""

    def __init__(self, text: str, mode: Verbosity = Verbosity.normal):
        self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"),
                                 TimeElapsedColumn(), console=console, transient=True)
        self.text = text
        self.shown = mode is Verbosity.normal

    def __enter__(self) -> Progress:
        if self.shown:
            self.progress.start()
            self.task = self.progress.add_task(self.text)
        return self.progress

    def __exit__(self, *exc: object) -> None:
        if self.shown:
            self.progress.stop()


#: The audit's domain columns on a terminal or in CSV (JSON: every key, docs/ledger.md).
AUDIT_TABLE_COLUMNS = ["domain", "notion", "unit", "cap_exact", "accounts", "spent_median_exact",
                       "spent_max_exact", "accounts_near_cap", "accounts_above_cap", "releases",
                       "users_denied", "denied_requests"]


@handle_errors
def audit_cmd(
    out: Path = OutOpt, ledger: Path | None = LedgerOpt,
    near_cap: float = typer.Option(0.1, "--near-cap", help="Fraction of the cap that counts as "
                                   "near."),
    fmt: OutputFormat = FormatOpt, verbose: bool = VerboseOpt, quiet: bool = QuietOpt,
    public_key: Path | None = typer.Option(
        None, "--public-key", help="Audit as an auditor: check the signed head with this "
                                   "public key file you kept (no secret key needed)."),
    expect_head: list[str] | None = typer.Option(
        None, "--expect-head", help="A head you kept: a checkpoint file (`ledger "
                                    "checkpoint`) or SEQ:HASH; repeatable. The audit fails "
                                    "if the ledger's chain does not contain it."),
    user: str | None = typer.Option(None, "--user", help="List only this user's entries."),
    domain: str | None = typer.Option(None, "--domain", help="List only this domain."),
    release: str | None = typer.Option(None, "--release", help="List only this release."),
    since: str | None = typer.Option(None, "--since", help="List only entries from this time "
                                     "on (ISO 8601, UTC unless an offset is given; inclusive)."),
    until: str | None = typer.Option(None, "--until", help="List only entries before this "
                                     "time (ISO 8601; exclusive)."),
    since_checkpoint: str | None = typer.Option(
        None, "--since-checkpoint", help="A checkpoint file you kept (`ledger checkpoint`) or "
        "SEQ:HASH: list what changed after it (releases, charges per domain, policy "
        "changes, denials). Exit 4 if the chain does not contain it."),
) -> None:
    """Compliance audit: one self-contained HTML page (plus CSV/JSON tables) to sign.

    Chain verification, ledger head, budget spent over time, spend per account
    against the cap, accounts near or above the cap, denials per user with
    their causes, releases, policy. --user/--domain/--release/--since/--until
    narrow the listings, never the verification (always the whole chain).
    Writes OUT/audit/ (audit.json: the schema in docs/ledger.md). Exit 4 when
    the ledger does not verify, does not contain a kept head, or (as an
    auditor: --public-key, or no noise key) is not independently verified.
    """
    from ledger.filters import Filter
    from ledger.heads import parse_expect_head

    mode = verbosity(verbose, quiet)
    for text in [*(expect_head or []), *([since_checkpoint] if since_checkpoint else [])]:
        parse_expect_head(text)  # bad input before Prefect starts
    Filter.parse(user=user, domain=domain, release=release, since=since, until=until)
    _prepare(mode)
    from flows.audit_flow import audit

    with _spinner("auditing the ledger", mode):
        res = audit(ledger_path=_abs(_ledger_path(ledger)), out_dir=_abs(out),
                    near_cap_fraction=near_cap, public_key=_abs(public_key),
                    expect_heads=[preflight.abs_head(h) for h in expect_head or []],
                    where={k: v for k, v in (("user", user), ("domain", domain),
                                             ("release", release), ("since", since),
                                             ("until", until)) if v is not None},
                    since_checkpoint=None if since_checkpoint is None
                    else preflight.abs_head(since_checkpoint))
    print_rows(res["domains"], fmt, title="Domains", columns=None if fmt is OutputFormat.json
               else AUDIT_TABLE_COLUMNS)
    if mode is not Verbosity.quiet or not res["ok"]:
        console.print(f"chain verification: {'[green]ok' if res['ok'] else '[red]FAILED'}[/] "
                      f"({res['entries_checked']} entries); report: {res['report']}")
    if not res["ok"]:
        raise typer.Exit(4)


@handle_errors
def evaluate_cmd(
    input_path: Path | None = typer.Argument(
        None, help="CSV, Parquet or DuckDB file of PUBLIC or SYNTHETIC curves or streams "
                   "(default: the bundled public data sets)."),
    domain: str | None = typer.Option(None, "--domain",
                                      help="Policy domain of FILE (required with FILE)."),
    policy: Path | None = PolicyOpt,
    mechanism: str | None = typer.Option(None, "--mechanism",
                                         help="Curves: " + " | ".join(
                                             preflight.CURVE_MECHANISMS) + " (default: "
                                         "privfuncseg). Streams: " + " | ".join(
                                             preflight.STREAM_MECHANISMS) + " (default: "
                                         "square_wave)."),
    options: str | None = typer.Option(None, "--options", help="Mechanism options as JSON."),
    epsilons: str | None = typer.Option(None, "--epsilons",
                                        help="Comma-separated ε (ρ for cgp domains) in the "
                                             "domain's units (default: a grid per bundled "
                                             "domain, else cap/100, cap/10, cap)."),
    n_curves: int = typer.Option(5, "--n-curves", help="Curves or streams evaluated."),
    seed: int = typer.Option(0, "--seed", help="Seed of the evaluation's noise."),
    out: Path = OutOpt, fmt: OutputFormat = FormatOpt, verbose: bool = VerboseOpt,
    quiet: bool = QuietOpt,
) -> None:
    """Raw against private on public or synthetic data: error tables, labelled plots.

    Never opens a ledger and charges nothing. This is the only report that
    shows raw data: do not run it on private data.
    """
    eps: list[float] | None = None
    if epsilons is not None:
        try:
            eps = [float(e) for e in epsilons.split(",") if e.strip()]
        except ValueError:
            raise ParameterError("--epsilons must be comma-separated numbers") from None
        if not eps or any(not e > 0 or e == float("inf") for e in eps):
            raise ParameterError("--epsilons must be positive finite numbers")
    mode = verbosity(verbose, quiet)
    opts = preflight.parse_options(options)
    _prepare(mode)
    from flows.evaluate import evaluate

    with _spinner("evaluating (no ledger, nothing charged)", mode):
        res = evaluate(out_dir=_abs(out), input_path=_abs(input_path), domain=domain,
                       policy_path=_abs(policy), mechanism=mechanism,
                       options=opts, epsilons=eps, seed=seed, n_curves=n_curves)
    print_rows(res["rows"], fmt, title="Mean errors in the domain's units (lower is better)")
    if mode is not Verbosity.quiet:
        console.print(f"nothing charged, no ledger opened; report: {res['report']}")


@handle_errors
def demo_cmd(
    out: Path = typer.Option(Path("out/demo"), "--out", help="Output directory."),
    ledger: Path | None = LedgerOpt, task_runner: str = RunnerOpt,
    prepare_only: bool = typer.Option(False, "--prepare-only",
                                      help="Only initialise the ledger with the bundled policy "
                                           "and write the inputs to OUT/inputs (no release)."),
    fmt: OutputFormat = FormatOpt, verbose: bool = VerboseOpt, quiet: bool = QuietOpt,
) -> None:
    """Demo release on the bundled data into an embedded ledger, then an audit."""
    mode = verbosity(verbose, quiet)
    ledger_path = _ledger_path(ledger)
    if prepare_only:
        from flows.demo import prepare_demo

        inputs = prepare_demo(out, ledger_path)
        print_rows([{"domain": d, "input": str(p)} for d, p in inputs.items()], fmt,
                   title=f"demo inputs (ledger: {ledger_path})")
        return
    preflight.task_runner_spec(task_runner)
    _prepare(mode)
    from flows.demo import run_demo

    if mode is not Verbosity.normal:  # log lines, or nothing: no progress display
        rows = run_demo(out, ledger_path, task_runner=task_runner)
    elif console.is_terminal:
        progress = Progress(SpinnerColumn(), TextColumn("{task.description}"),
                            TimeElapsedColumn(), console=console)
        with progress:
            current: dict[str, Any] = {}

            def on_step(label: str) -> None:
                if "id" in current:
                    progress.update(current["id"], completed=1, total=1)
                current["id"] = progress.add_task(label, total=None)

            rows = run_demo(out, ledger_path, task_runner=task_runner, on_step=on_step)
            if "id" in current:
                progress.update(current["id"], completed=1, total=1)
    else:  # a log or a scheduler: one plain line per step, with its time
        lines = _StepLines()
        rows = run_demo(out, ledger_path, task_runner=task_runner, on_step=lines)
        lines(None)  # the last step's line
    print_rows(rows, fmt, title=f"privpipe demo (ledger: {ledger_path})",
               columns=["step", "release_id", "released", "denied", "rejected", "report"])
    if mode is not Verbosity.quiet:
        console.print("Open the reports above in a browser; rerun `privpipe demo` to check that "
                      "it reproduces the same outputs and charges nothing more.",
                      highlight=False)


class _StepLines:
    """Print each demo step as a plain line when it ends: ``label: N s`` (None: the end)."""

    def __init__(self) -> None:
        self.label: str | None = None
        self.start = 0.0

    def __call__(self, label: str | None) -> None:
        import time

        now = time.perf_counter()
        if self.label is not None:
            console.print(f"{self.label}: {now - self.start:.0f} s", highlight=False,
                          markup=False, soft_wrap=True)
        self.label, self.start = label, now


@handle_errors
def serve_cmd(
    config: Path = typer.Option(..., "--config", help="Schedules TOML (\\[\\[release]] tables)."),
    port: int = typer.Option(4200, "--port", help="Port of the loopback Prefect server started "
                             "when no Prefect API is configured."),
    check: bool = typer.Option(False, "--check", help="Validate every schedule (keys, cron, "
                               "parameters, files, ledger, domains) and exit: 0 valid, 2 "
                               "listing every problem."),
    fmt: OutputFormat = FormatOpt, verbose: bool = VerboseOpt,
) -> None:
    """Serve the release flows on cron schedules (needs a real Prefect server).

    Uses the configured Prefect API (PREFECT_API_URL or the active profile);
    otherwise starts a Prefect server (UI and scheduler) on 127.0.0.1:PORT that
    stops with this command. Every schedule is checked first. Runs until interrupted.
    """
    from flows.serve import build_deployments, check_schedules, read_schedules
    from flows.settings import configure_prefect

    configure_prefect()
    if verbose:
        os.environ["PREFECT_LOGGING_LEVEL"] = "INFO"
    schedules, shape = read_schedules(config)
    check_schedules(schedules, config, shape)  # every problem of the file, in one round
    if check:
        print_rows([{"deployment": s.name, "flow": s.flow, "cron": s.cron,
                     "timezone": s.timezone} for s in schedules], fmt,
                   title="Schedules: valid (not served: --check)")
        return
    from flows.prefect_server import prefect_session

    with prefect_session(serve_port=port) as url:
        from prefect import serve

        deployments = build_deployments(schedules)
        console.print(f"serving {len(deployments)} deployment(s) against {url}; Ctrl-C to stop",
                      highlight=False)
        serve(*deployments)
