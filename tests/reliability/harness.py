"""Crash-and-rerun harness shared by `tests/reliability/` and `benchmarks/soak.py`.

One *trial* takes a template ledger (initialised, policy applied, some budget
already spent), copies it with its noise key into a fresh directory, starts a
real release there as a subprocess, kills it (SIGKILL at a fault point through
PRIVPIPE_FAULT_AT / PRIVPIPE_FAULT_MODE=kill, or SIGKILL from outside after a
random delay), reruns the same release id to completion and then checks:

* ``privpipe ledger verify`` exits 0 (else the trial is *unverifiable*);
* every account's balance equals the balance of an uninterrupted run (above
  it: *double-charged*; below it, a failed rerun, a missing user or an output
  row without a committed charge: *lost*);
* the Parquet outputs and manifest.json equal the uninterrupted run's byte for
  byte (else *mismatched*).

The uninterrupted reference is the same release id run on another copy of the
same template ledger and key, into another output directory: a release's
outputs are a function of (noise key, release id, input, parameters) and its
charges a function of the pre-run balances, so this is the run the crashed one
must reproduce. Reusing the crashed trial's own ledger would not do: the
release would be replayed there, and could hide a double charge.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[2]
POLICY_TOML = textwrap.dedent("""
    [domains.tracks]
    kind = "curves"
    public = { duration = true, points = true }
    notion = "gp"
    cap = "4"
    time_unit = "s"
    value_columns = ["x", "y"]
    value_unit = "m"

    [domains.meters]
    kind = "streams"
    notion = "wevent"
    cap = "4"
    w = 4
    time_unit = "step"
    value_range = [0.0, 10.0]
    value_unit = "kW"
""")


# --------------------------------------------------------------------------- inputs


def write_policy(path: Path) -> Path:
    """Write the reliability policy (a curves domain and a w-event streams domain)."""
    path.write_text(POLICY_TOML)
    return path


def write_curves_csv(path: Path, *, users: int = 6, seed: int = 7,
                     sentinel: float | None = None) -> Path:
    """Smooth 2-D curves, 1-2 per user; `sentinel` replaces one x value when given."""
    rng = np.random.default_rng(seed)
    frames = []
    for u in range(users):
        for c in range(1 + u % 2):
            n = 60 + 8 * u
            t = np.cumsum(rng.uniform(0.5, 1.5, n))
            t -= t[0]
            frames.append(pd.DataFrame({
                "user_id": f"user-{u}", "curve_id": f"c{c}", "t": t,
                "x": 50 * np.sin(t / 40 + u) + 3 * t, "y": 30 * np.cos(t / 25 + c)}))
    df = pd.concat(frames, ignore_index=True)
    if sentinel is not None:
        df.loc[len(df) // 2, "x"] = sentinel
    df.to_csv(path, index=False, float_format="%.6f")
    return path


def write_streams_csv(path: Path, *, users: int = 4, steps: int = 96, seed: int = 11,
                      sentinel: float | None = None) -> Path:
    """Periodic streams (period 12) in [0, 10]; `sentinel` replaces one value when given."""
    rng = np.random.default_rng(seed)
    frames = []
    for u in range(users):
        s = np.arange(steps)
        v = np.clip(5 + 4 * np.sin(2 * np.pi * s / 12 + u) + rng.normal(0, 0.2, steps), 0, 10)
        frames.append(pd.DataFrame({"user_id": f"meter-{u}", "stream_id": "s0", "t": s,
                                    "value": v}))
    df = pd.concat(frames, ignore_index=True)
    if sentinel is not None:
        df.loc[len(df) // 2, "value"] = sentinel
    df.to_csv(path, index=False, float_format="%.6f")
    return path


# --------------------------------------------------------------------------- ledgers


def make_template(root: Path) -> Path:
    """A ledger with the policy applied and some budget already spent; returns its path."""
    from ledger import Ledger, Request, Settlement
    from mechanisms.cost import Cost, CostItem
    from schemas.policy import load_policy

    root.mkdir(parents=True, exist_ok=True)
    policy = write_policy(root / "policy.toml")
    path = root / "ledger.duckdb"
    led = Ledger.init(path)
    led.apply_policy(load_policy(policy))
    # earlier spending, so the crashed release runs against non-trivial balances
    reqs = [Request(f"user-{u}", "tracks", amount=Fraction(1, 3)) for u in (0, 2, 3)]
    led.reserve("earlier", reqs, mechanism="manual-charge", parameters={"epsilon": "1/3"})
    led.settle("earlier", [Settlement(r.user_id, "tracks", "release",
                                      Cost("gp", Fraction(1, 3),
                                           (CostItem("charge", "gp", Fraction(1, 3)),)))
                           for r in reqs])
    return path


def clone_ledger(src: Path, dst_dir: Path) -> Path:
    """Copy a ledger, its WAL (if any), keys, pin and head counter (modes kept) to `dst_dir`."""
    dst_dir.mkdir(parents=True, exist_ok=True)
    dst = dst_dir / src.name
    for suffix in ("", ".wal", ".key", ".sign", ".pub", ".pin", ".counter"):
        s = Path(str(src) + suffix)
        if s.exists():
            shutil.copy2(s, Path(str(dst) + suffix))
    return dst


def balances(ledger_path: Path) -> dict[tuple[str, str, str], Fraction]:
    """Spent budget of every account, exact."""
    from ledger import Ledger

    return {(r["user_id"], r["domain"], r["stream_id"]): Fraction(r["spent"])
            for r in Ledger(ledger_path).balances()}


def committed_charges(ledger_path: Path, release_id: str) -> dict[str, int]:
    """Net charge in quanta per user of one release (reserve minus refunds and closes)."""
    con = duckdb.connect(str(ledger_path), read_only=True)
    try:
        rows = con.execute(
            "SELECT user_id, sum(CASE kind WHEN 'reserve' THEN amount "
            "WHEN 'refund' THEN -amount WHEN 'close' THEN -amount ELSE 0 END) "
            "FROM entries WHERE release_id = ? AND user_id <> '' GROUP BY user_id",
            [release_id]).fetchall()
    finally:
        con.close()
    return {str(u): int(q) for u, q in rows}


def ledger_state(ledger_path: Path, release_id: str) -> str:
    """How far a release got, as the ledger shows it: none, reserved (k entries), settled..."""
    try:
        con = duckdb.connect(str(ledger_path), read_only=True)
    except duckdb.Error as err:
        return f"unreadable ({type(err).__name__})"
    try:
        row = con.execute("SELECT state FROM releases WHERE release_id = ?",
                          [release_id]).fetchone()
        kinds = dict(con.execute("SELECT kind, count(*) FROM entries WHERE release_id = ? "
                                 "GROUP BY kind", [release_id]).fetchall())
    finally:
        con.close()
    if row is None:
        return "none"
    return f"{row[0]} ({kinds.get('reserve', 0)} reserve, {kinds.get('settle', 0)} settle)"


def output_users(rdir: Path) -> set[str]:
    """User ids present in any Parquet output of a release directory."""
    import pyarrow.parquet as pq

    users: set[str] = set()
    for p in rdir.glob("*.parquet"):
        table = pq.read_table(p)
        if "user_id" in table.column_names:
            users |= set(table.column("user_id").to_pylist())
    return users


#: The release report states when it was written and the ledger's state after the
#: release, and the manifest carries the signed ledger head the release ended at: two
#: runs of one release differ there by design (the entries' times are hashed into the
#: head); the manifest still seals the report's digest, and everything else (outputs,
#: plots, the rest of the manifest) must match.
TIMESTAMPED = ("report.md", "report.html")


def digest(rdir: Path) -> dict[str, str]:
    """SHA-256 of every Parquet output and of manifest.json (minus the report's digests)."""
    out = {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
           for p in sorted(rdir.glob("*.parquet"))}
    path = rdir / "manifest.json"
    if path.exists():
        manifest = json.loads(path.read_bytes())
        for name in TIMESTAMPED:
            manifest.get("sha256", {}).pop(name, None)
        manifest.pop("ledger_head", None)
        text = json.dumps(manifest, sort_keys=True, separators=(",", ":"))
        out[path.name] = hashlib.sha256(text.encode()).hexdigest()
    return out


# --------------------------------------------------------------------------- subprocesses


def privpipe_cmd() -> list[str]:
    """The command that runs the privpipe CLI with this interpreter."""
    return [sys.executable, "-m", "flows.cli"]


def release_args(kind: str, input_path: Path, release_id: str, out: Path, ledger: Path,
                 policy: Path) -> list[str]:
    """Arguments of `privpipe release curves|streams` for a trial."""
    common = ["--release-id", release_id, "--out", str(out), "--ledger", str(ledger),
              "--policy", str(policy), "--chunk-users", "2"]
    if kind == "curves":
        return ["release", "curves", str(input_path), "--domain", "tracks", "--epsilon", "1/2",
                *common]
    return ["release", "streams", str(input_path), "--domain", "meters", "--epsilon", "2",
            *common]


def cli_env(home: Path, *, api_url: str | None = None, fault_at: str | None = None,
            fault_mode: str = "kill") -> dict[str, str]:
    """Environment of one CLI subprocess: own PRIVPIPE_HOME/PREFECT_HOME, optional server."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PREFECT_", "PRIVPIPE_"))}
    env.update({
        "PRIVPIPE_HOME": str(home),
        "PREFECT_HOME": str(home / "prefect"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
        "PREFECT_LOGGING_LEVEL": "WARNING",
        "PREFECT_RESULTS_PERSIST_BY_DEFAULT": "false",
        "PYTHONPATH": str(REPO),
        "MPLBACKEND": "Agg",
        "COLUMNS": "200",
    })
    if api_url:
        env["PREFECT_API_URL"] = api_url
    if fault_at:
        env["PRIVPIPE_FAULT_AT"] = fault_at
        env["PRIVPIPE_FAULT_MODE"] = fault_mode
    return env


@dataclass
class Run:
    """Outcome of one CLI subprocess."""

    returncode: int
    stdout: str
    stderr: str
    seconds: float
    killed_from_outside: bool = False


def run_cli(args: list[str], env: dict[str, str], *, cwd: Path, timeout: float = 600,
            kill_after: float | None = None) -> Run:
    """Run the CLI; with `kill_after`, SIGKILL its whole process group after that many seconds.

    Output goes to files, not pipes: a CLI that SIGKILLs itself at a fault point
    leaves its temporary Prefect server (same process group) holding inherited
    pipes, and waiting for their end would hang; the group is killed once the
    CLI process itself has ended.
    """
    import tempfile

    start = time.monotonic()
    killed = False
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([*privpipe_cmd(), *args], env=env, cwd=cwd, text=True,
                                stdout=out, stderr=err, start_new_session=True)
        try:
            try:
                proc.wait(timeout=kill_after if kill_after is not None else timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                killed = kill_after is not None
                proc.wait()
        finally:
            # the ephemeral Prefect server is a child in the same session: never leave it
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if not killed and kill_after is None and proc.returncode == -signal.SIGKILL \
            and time.monotonic() - start >= timeout:
        stderr += "\n[harness: timed out]"
    return Run(proc.returncode, stdout, stderr, time.monotonic() - start, killed)


# --------------------------------------------------------------------------- trials


@dataclass
class Reference:
    """An uninterrupted run of one release id on a copy of the template."""

    kind: str
    release_id: str
    balances: dict[tuple[str, str, str], Fraction]
    digest: dict[str, str]
    users: set[str]
    seconds: float


@dataclass
class TrialResult:
    """What one crash-and-rerun trial found (each flag counts once in the soak summary)."""

    kind: str
    fault: str
    killed: bool
    lost: bool = False
    double_charged: bool = False
    unverifiable: bool = False
    mismatched: bool = False
    notes: list[str] = field(default_factory=list)
    after_kill: str = ""

    @property
    def ok(self) -> bool:
        """True when the trial found nothing wrong."""
        return not (self.lost or self.double_charged or self.unverifiable or self.mismatched)


@dataclass
class Setup:
    """Inputs and template shared by all trials of a session."""

    root: Path
    template: Path
    policy: Path
    inputs: dict[str, Path]
    api_url: str | None = None


def make_setup(root: Path, *, api_url: str | None = None) -> Setup:
    """Create the template ledger and the curves/streams inputs under `root`."""
    template = make_template(root / "template")
    inputs = {"curves": write_curves_csv(root / "curves.csv"),
              "streams": write_streams_csv(root / "streams.csv")}
    return Setup(root, template, root / "template" / "policy.toml", inputs, api_url)


def reference_run(setup: Setup, kind: str, release_id: str, *, tag: str = "ref") -> Reference:
    """Run `release_id` uninterrupted on a fresh copy of the template."""
    work = setup.root / f"{tag}-{kind}-{release_id}"
    ledger = clone_ledger(setup.template, work / "home")
    out = work / "out"
    run = run_cli(release_args(kind, setup.inputs[kind], release_id, out, ledger, setup.policy),
                  cli_env(work / "home", api_url=setup.api_url), cwd=work)
    if run.returncode != 0:
        raise RuntimeError(f"reference run failed ({run.returncode}):\n{run.stdout}\n{run.stderr}")
    rdir = out / release_id
    return Reference(kind, release_id, balances(ledger), digest(rdir), output_users(rdir),
                     run.seconds)


def run_trial(setup: Setup, ref: Reference, name: str, *, fault_at: str | None = None,
              kill_after: float | None = None) -> TrialResult:
    """Kill a release (at `fault_at`, or after `kill_after` seconds), rerun it, check it."""
    work = setup.root / name
    home = work / "home"
    ledger = clone_ledger(setup.template, home)
    out = work / "out"
    args = release_args(ref.kind, setup.inputs[ref.kind], ref.release_id, out, ledger,
                        setup.policy)
    fault = f"point:{fault_at}" if fault_at else f"delay:{kill_after:.2f}s"
    crash = run_cli(args, cli_env(home, api_url=setup.api_url, fault_at=fault_at), cwd=work,
                    kill_after=kill_after)
    killed = crash.returncode == -signal.SIGKILL
    res = TrialResult(ref.kind, fault, killed, after_kill=ledger_state(ledger, ref.release_id))
    if not killed and crash.returncode != 0:
        res.lost = True
        res.notes.append(f"crash run exited {crash.returncode}: {crash.stderr[-400:]}")
    check_outputs_are_charged(res, ledger, out / ref.release_id, "after the kill")
    rerun = run_cli(args, cli_env(home, api_url=setup.api_url), cwd=work)
    ver = run_cli(["ledger", "verify", "--ledger", str(ledger)], cli_env(home), cwd=work)
    return check_after_rerun(res, ref, ledger, out / ref.release_id,
                             (rerun.returncode, rerun.stdout + rerun.stderr),
                             (ver.returncode, ver.stdout + ver.stderr))


def check_after_rerun(res: TrialResult, ref: Reference, ledger: Path, rdir: Path,
                      rerun: tuple[int, str], verify: tuple[int, str]) -> TrialResult:
    """Apply the four checks to a trial whose rerun has finished.

    `rerun` and `verify` are (exit code, output) of the rerun and of
    ``privpipe ledger verify`` on the trial's ledger.
    """
    if rerun[0] != 0:
        res.lost = True
        res.notes.append(f"rerun exited {rerun[0]}: {rerun[1][-600:]}")
    if verify[0] != 0:
        res.unverifiable = True
        res.notes.append(f"verify exited {verify[0]}: {verify[1][-400:]}")
    got = balances(ledger)
    for key in sorted(set(got) | set(ref.balances)):
        a, b = got.get(key, Fraction(0)), ref.balances.get(key, Fraction(0))
        if a > b:
            res.double_charged = True
            res.notes.append(f"account {key}: spent {a} > uninterrupted {b}")
        elif a < b:
            res.lost = True
            res.notes.append(f"account {key}: spent {a} < uninterrupted {b} (charge lost)")
    users = check_outputs_are_charged(res, ledger, rdir, "after the rerun")
    if users != ref.users:
        res.lost = True
        res.notes.append(f"released users {sorted(users)} != uninterrupted {sorted(ref.users)}")
    dig = digest(rdir) if rdir.exists() else {}
    if dig != ref.digest:
        res.mismatched = True
        bad = sorted(k for k in set(dig) | set(ref.digest) if dig.get(k) != ref.digest.get(k))
        res.notes.append(f"outputs differ from the uninterrupted run: {bad}")
    return res


def check_outputs_are_charged(res: TrialResult, ledger: Path, rdir: Path, when: str) -> set[str]:
    """Flag output rows of users without a committed charge; return the output users."""
    users = output_users(rdir) if rdir.exists() else set()
    charged = {u for u, q in committed_charges(ledger, rdir.name).items() if q > 0}
    if users - charged:
        res.lost = True
        res.notes.append(f"{when}: output rows without a committed charge: "
                         f"{sorted(users - charged)}")
    return users


def summary_line(results: list[TrialResult]) -> str:
    """`N trials, L lost, D double-charged, U unverifiable, M mismatched outputs`."""
    return (f"{len(results)} trials, {sum(r.lost for r in results)} lost, "
            f"{sum(r.double_charged for r in results)} double-charged, "
            f"{sum(r.unverifiable for r in results)} unverifiable, "
            f"{sum(r.mismatched for r in results)} mismatched outputs")


# --------------------------------------------------------------------------- a Prefect server


class PrefectServer:
    """A loopback `prefect server start` shared by many CLI subprocesses (soak only).

    Each CLI run would otherwise start its own temporary server (10-40 s); the
    ledger, not Prefect, is the source of truth, so sharing one changes nothing
    the trials check.
    """

    def __init__(self, home: Path, port: int):
        """Remember where the server keeps its database and which port it listens on."""
        self.home, self.port = home, port
        self.url = f"http://127.0.0.1:{port}/api"
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> PrefectServer:
        """Start the server and wait until its health endpoint answers."""
        import urllib.request

        self.home.mkdir(parents=True, exist_ok=True)
        env = cli_env(self.home)
        env["PREFECT_HOME"] = str(self.home)
        self.log = open(self.home / "server.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [str(Path(sys.executable).with_name("prefect")), "server", "start", "--host",
             "127.0.0.1", "--port", str(self.port)], env=env, stdout=self.log,
            stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:  # noqa: S310
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(1)
        self.__exit__()
        raise RuntimeError(f"the Prefect server did not start; see {self.home / 'server.log'}")

    def __exit__(self, *exc: object) -> None:
        """Stop the server (its whole process group) and close the log."""
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=20)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.proc = None
        self.log.close()
