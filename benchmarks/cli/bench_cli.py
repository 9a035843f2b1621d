"""Benchmark: what a CLI command costs before and around the release itself.

Two tables, each from fresh `privpipe` processes (the installed console script),
runs of the compared cases interleaved so they see the same machine load:

1. **Fail fast**: the wall time until a bad release exits 2 (missing input, ε = 0,
   unknown domain, a ledger that is a directory / a CSV / without its key, bad
   mechanism options). Goal: every error under 3 s, Prefect never started.
   Malformed inputs (issue #29: a wrong header, a truncated last row, a row with
   an extra field, a text value column, ε = 1e400; and a truncated last row of a
   2·10^6-row, 64 MB CSV, found by the structural pass over every record): goal
   under 1 s, Prefect never started.
2. **Fixed cost of a release** (one user, one 40-point curve, so the mechanism
   costs nothing): the whole command with a Prefect server already running
   (PREFECT_API_URL; goal <= 5 s) and with nothing configured, so the embedded
   temporary server starts (goal <= 12 s; also on a Prefect home with no database
   yet, the first command on a new machine), next to its parts measured in their
   own processes: interpreter + CLI imports, the flows' imports (Prefect, pandas,
   pyarrow: overlapped with the server's start by the CLI), the temporary
   server's start until healthy, the ledger open, one empty flow run.

    .venv/bin/python benchmarks/cli/bench_cli.py [--repeat 3]

Runs the machine's own load along; report the ratios and medians it prints.
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PRIVPIPE = str(BIN / "privpipe")

POLICY = textwrap.dedent("""
    [domains.bench]
    kind = "curves"
    notion = "gp"
    cap = "1000000"
    time_unit = "s"
    value_columns = ["x", "y"]
    value_unit = "m"

    [domains.bench.public]
    duration = true
    points = true
""")

PART = {
    "interpreter + CLI imports": "import flows.cli",
    "flows' imports (Prefect, pandas, pyarrow)": "import flows.release",
    "temporary server start until healthy": (
        "from flows.prefect_server import TemporaryServer\n"
        "from flows.settings import prefect_home\n"
        "s = TemporaryServer(prefect_home()).start(); s.wait_ready(); s.stop()"),
    "ledger open": "from ledger import Ledger; Ledger({ledger!r})",
    "one empty flow run (server running)": (
        "from prefect import flow\n"
        "@flow(persist_result=False)\n"
        "def empty(): return 1\n"
        "empty()"),
}


def _env(home: Path, api_url: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "PRIVPIPE_"))}
    env.update(PRIVPIPE_HOME=str(home), HOME=str(home), PYTHONPATH=str(ROOT))
    if api_url:
        env["PREFECT_API_URL"] = api_url
    return env


CPU: dict[str, list[float]] = {}


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _timed(argv: list[str], env: dict[str, str], cwd: Path,
           label: str | None = None) -> tuple[float, int, str]:
    """Wall seconds, exit code, stderr; the CPU seconds of the process tree go to CPU[label]."""
    t0, c0 = time.perf_counter(), _cpu()
    res = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    if label is not None:
        CPU.setdefault(label, []).append(_cpu() - c0)
    return time.perf_counter() - t0, res.returncode, res.stderr


def _setup(work: Path) -> tuple[Path, Path, Path]:
    import numpy as np

    from ledger import Ledger
    from schemas.policy import load_policy

    work.mkdir(parents=True, exist_ok=True)
    policy = work / "policy.toml"
    policy.write_text(POLICY)
    home = work / "home"
    Ledger.init(home / "ledger.duckdb").apply_policy(load_policy(policy))
    t = np.arange(40.0)
    rows = ["user_id,curve_id,t,x,y"] + [f"u1,c1,{v:g},{np.sin(v / 7):.6f},{v / 3:.6f}"
                                          for v in t]
    tiny = work / "tiny.csv"
    tiny.write_text("\n".join(rows) + "\n")
    return policy, home, tiny


def fail_fast_table(work: Path, repeat: int) -> list[tuple[str, float, float]]:
    policy, home, tiny = _setup(work / "ff")
    nokey = work / "nokey"
    from ledger import Ledger

    Ledger.init(nokey / "ledger.duckdb")
    (nokey / "ledger.duckdb.key").unlink()
    base = ["release", "curves"]
    cases = {
        "missing input": [*base, "missing.csv", "--domain", "bench", "--epsilon", "1"],
        "epsilon 0": [*base, str(tiny), "--domain", "bench", "--epsilon", "0"],
        "unknown domain": [*base, str(tiny), "--domain", "nope", "--epsilon", "1"],
        "ledger is a directory": [*base, str(tiny), "--domain", "bench", "--epsilon", "1",
                                  "--ledger", str(work)],
        "ledger is a CSV": [*base, str(tiny), "--domain", "bench", "--epsilon", "1",
                            "--ledger", str(tiny)],
        "ledger without its key": [*base, str(tiny), "--domain", "bench", "--epsilon", "1",
                                   "--ledger", str(nokey / "ledger.duckdb")],
        "unknown mechanism option": [*base, str(tiny), "--domain", "bench", "--epsilon", "1",
                                     "--options", '{"nope": 1}'],
    }
    cases.update(_malformed_cases(work, tiny))
    times: dict[str, list[float]] = {c: [] for c in cases}
    for _ in range(repeat):
        for name, args in cases.items():
            secs, code, err = _timed([PRIVPIPE, *args, "--policy", str(policy)], _env(home),
                                     work, name)
            if code != 2 or (home / "prefect" / "prefect.db").exists():
                raise SystemExit(f"{name}: exit {code} (expected 2, no Prefect): {err}")
            times[name].append(secs)
    return [(n, statistics.median(v), max(v)) for n, v in times.items()]


def _malformed_cases(work: Path, tiny: Path) -> dict[str, list[str]]:
    """Releases of malformed inputs (issue #29), each a file derived from `tiny`."""
    lines = tiny.read_text().splitlines(keepends=True)
    files = {
        "malformed: wrong header": ["user,curve_id,t,x,y\n", *lines[1:]],
        "malformed: truncated last row": [*lines, "u1,0"],
        "malformed: row with an extra field": [lines[0], "u2,1,2020-01-01T00:00:00Z,9,3,7\n",
                                               *lines[1:]],
        "malformed: value column of text": [lines[0], *(",".join([*ln.split(",")[:3], "a",
                                                                  "b\n"]) for ln in lines[1:])],
    }
    cases = {}
    for i, (name, content) in enumerate(files.items()):
        path = work / f"malformed-{i}.csv"
        path.write_text("".join(content))
        cases[name] = ["release", "curves", str(path), "--domain", "bench", "--epsilon", "1"]
    big = work / "malformed-big.csv"
    with big.open("w") as f:
        f.write(lines[0])
        for u in range(20_000):
            f.writelines(f"u{u},c1,{t},{t * 0.37:.6f},{t * 0.11:.6f}\n" for t in range(100))
        f.write("u1,0")
    cases["malformed: truncated last row, 2e6 rows"] = [
        "release", "curves", str(big), "--domain", "bench", "--epsilon", "1"]
    cases["malformed: epsilon 1e400"] = ["release", "curves", str(tiny), "--domain", "bench",
                                         "--epsilon", "1e400"]
    return cases


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Server:
    """A `prefect server start` on loopback, as an operator would run one."""

    def __init__(self, home: Path):
        self.home, self.port = home, _free_port()
        self.url = f"http://127.0.0.1:{self.port}/api"

    def __enter__(self) -> _Server:
        env = _env(self.home)
        env["PREFECT_HOME"] = str(self.home / "prefect")
        self.log = open(self.home / "server.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen([str(BIN / "prefect"), "server", "start", "--host",
                                      "127.0.0.1", "--port", str(self.port)], env=env,
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2):
                    return self
            except OSError:
                time.sleep(0.5)
        raise SystemExit(f"prefect server did not start: see {self.home / 'server.log'}")

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=60)
        self.log.close()


NEW_HOME = "embedded server, new Prefect home"
"""Its first start: Prefect's database made (from the template: `flows.prefect_server`)."""


def fixed_cost_table(work: Path, repeat: int) -> tuple[dict[str, float], dict[str, float]]:
    policy, home, tiny = _setup(work / "fc")
    (work / "server").mkdir()
    totals: dict[str, list[float]] = {"server already running": [], "embedded server": [],
                                      NEW_HOME: []}
    parts: dict[str, list[float]] = {p: [] for p in PART}
    with _Server(work / "server") as server:
        for i in range(repeat):
            for mode, url in (("server already running", server.url), ("embedded server", None),
                              (NEW_HOME, None)):
                env = _env(home, url)
                if mode == NEW_HOME:  # a Prefect home with no database yet, as on a new machine
                    env["PREFECT_HOME"] = str(work / f"new-prefect-home-{i}")
                secs, code, err = _timed(
                    [PRIVPIPE, "release", "curves", str(tiny), "--domain", "bench", "--epsilon",
                     "1/1000", "--policy", str(policy), "--release-id", f"{mode[:3]}-{i}",
                     "--out", str(work / "out")], env, work, mode)
                if code != 0:
                    raise SystemExit(f"{mode}: exit {code}: {err}")
                totals[mode].append(secs)
            for name, code_text in PART.items():
                src = code_text.format(ledger=str(home / "ledger.duckdb"))
                url = server.url if name.startswith("one empty flow") else None
                secs, code, err = _timed([sys.executable, "-c", src], _env(home, url), work,
                                         name)
                if code != 0:
                    raise SystemExit(f"{name}: exit {code}: {err}")
                parts[name].append(secs)
    baseline = statistics.median(
        _timed([sys.executable, "-c", "pass"], _env(home), work, "interpreter")[0]
        for _ in range(3))
    cpu_base = statistics.median(CPU["interpreter"])
    med_parts = {n: statistics.median(v) for n, v in parts.items()}
    # every part but the interpreter runs in its own interpreter: subtract its start
    for n in med_parts:
        if n != "interpreter + CLI imports":
            med_parts[n] = max(0.0, med_parts[n] - baseline)
            CPU[n] = [max(0.0, c - cpu_base) for c in CPU[n]]
    return {n: statistics.median(v) for n, v in totals.items()}, med_parts


def _c(label: str) -> str:
    return f"{statistics.median(CPU[label]):.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--fail-fast-only", action="store_true",
                    help="Only the fail-fast table (no Prefect server is started).")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="privpipe-bench-cli-"))
    ff = fail_fast_table(work, args.repeat)
    print(f"\nFail fast: wall time to exit 2, median (max) of {args.repeat} runs; goal < 3 s "
          "(malformed inputs: < 1 s)\n")
    print("| error | median s | max s | CPU s |\n|---|---|---|---|")
    for name, med, worst in ff:
        print(f"| {name} | {med:.2f} | {worst:.2f} | {_c(name)} |")
    if args.fail_fast_only:
        return
    totals, parts = fixed_cost_table(work, args.repeat)
    print(f"\nFixed cost of a CLI release (1 user, 40 points), median of {args.repeat}\n")
    print("| case | wall s | CPU s (the command and its children) | goal (wall) |")
    print("|---|---|---|---|")
    print(f"| whole command, Prefect server already running | "
          f"{totals['server already running']:.2f} | {_c('server already running')} | <= 5 |")
    print(f"| whole command, embedded temporary server | {totals['embedded server']:.2f} "
          f"| {_c('embedded server')} | <= 12 |")
    print(f"| whole command, embedded temporary server, new Prefect home | "
          f"{totals[NEW_HOME]:.2f} | {_c(NEW_HOME)} | <= 12 |")
    print("\nParts, each in its own process (interpreter start subtracted but for the first)\n")
    print("| part | wall s | CPU s |\n|---|---|---|")
    for name, secs in parts.items():
        print(f"| {name} | {secs:.2f} | {_c(name)} |")
    imports = parts["flows' imports (Prefect, pandas, pyarrow)"]
    start = parts["temporary server start until healthy"]
    gap = totals["embedded server"] - totals["server already running"]
    print(f"\nembedded - running: {gap:.2f} s; the server start not hidden by the imports "
          f"it overlaps: {max(imports, start) - imports:.2f} s")

if __name__ == "__main__":
    main()
