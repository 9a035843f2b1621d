"""Where the served ledger's time goes: each stage of reserve + settle timed in one process.

Run:  .venv/bin/python benchmarks/ledger/profile_served.py [--users 100000] [--profile N]

The stages of ``bench_ledger.py``'s served row without HTTP and TLS: the
client's encode, the service's decode + ledger call (`LedgerService.handle`,
authentication and role checks included) and answer encode, the client's decode
of the answer. The ledger rows are the embedded calls the service makes. With
``--profile N`` the N most expensive functions (cProfile, tottime) of the whole
sequence are printed too. Prints a table; the HTTPS transfer is the served wall
time minus these stages.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
for extra in (REPO, REPO / "tests" / "ledger"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

PUBLIC = {"public": {"duration": True, "points": True}}


class Stages:
    """Wall seconds of named stages, optionally under one cProfile."""

    def __init__(self, profile: bool):
        self.times: dict[str, float] = {}
        self.prof = cProfile.Profile() if profile else None

    def run(self, name, fn):
        """fn() timed as `name` (and profiled)."""
        t = time.perf_counter()
        if self.prof:
            self.prof.enable()
        out = fn()
        if self.prof:
            self.prof.disable()
        self.times[name] = time.perf_counter() - t
        return out


def run(n: int, st: Stages) -> dict[str, float]:
    """Reserve + settle n users through `LedgerService.handle`; body sizes in MB."""
    from served_helpers import write_clients

    from flows.ledger_server import LedgerService
    from ledger import Ledger, Request, Settlement
    from ledger import remote_codec as codec
    from mechanisms.cost import Cost, CostItem
    from schemas.policy import parse_policy

    sizes = {}
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "l.duckdb"
        Ledger.init(path, actor="bench").apply_policy(parse_policy(
            {"domains": {"ais": {"kind": "curves", **PUBLIC, "notion": "gp", "cap": "1.0"}}}))
        tokens = write_clients(Path(d) / "clients.toml")
        svc = LedgerService(path, Path(d) / "clients.toml")
        auth = "Bearer " + tokens["rel-a"]
        eps = Fraction(1, 10)
        reqs = [Request(f"user-{i:07d}", "ais", amount=eps) for i in range(n)]
        cost = Cost("gp", eps, (CostItem("svt", "gp", eps / 2),
                                CostItem("project", "gp", eps / 2)))
        sets = [Settlement(f"user-{i:07d}", "ais", "release", cost) for i in range(n)]
        body = st.run("client: encode reserve", lambda: codec.dumps(dict(
            release_id="r", requests=reqs, mechanism="bench", parameters={"epsilon": "0.1"},
            flow_run_id=None, input_fingerprint=None)))
        sizes["reserve body"] = len(body)
        status, answer = st.run("service: reserve (decode, ledger, encode)",
                                lambda: svc.handle(auth, "reserve", body))
        assert status == 200, answer[:300]
        sizes["reserve answer"] = len(answer)
        st.run("client: decode decisions", lambda: codec.loads(answer))
        body = st.run("client: encode settle", lambda: codec.dumps(dict(
            release_id="r", settlements=sets, input_fingerprint=None, parameters=None)))
        sizes["settle body"] = len(body)
        status, answer = st.run("service: settle (decode, ledger, encode)",
                                lambda: svc.handle(auth, "settle", body))
        assert status == 200, answer[:300]
        svc.close()
    return sizes


def main() -> None:
    """Run the stages for --users users and print their table (and the profile)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, default=100_000)
    ap.add_argument("--profile", type=int, default=0, help="print the N costliest functions")
    args = ap.parse_args()
    st = Stages(args.profile > 0)
    sizes = run(args.users, st)
    width = max(map(len, [*st.times, *sizes])) + 2
    print(f"{'stage':{width}}wall s")
    for name, sec in st.times.items():
        print(f"{name:{width}}{sec:.3f}")
    for name, size in sizes.items():
        print(f"{name:{width}}{size / 1e6:.2f} MB")
    if st.prof:
        out = io.StringIO()
        pstats.Stats(st.prof, stream=out).sort_stats("tottime").print_stats(args.profile)
        print(out.getvalue())


if __name__ == "__main__":
    main()
