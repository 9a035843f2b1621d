"""A release and an audit from Python, as in a notebook (docs/python-api.md).

    python examples/python_api.py [WORKDIR]

Writes a small policy and synthetic trajectories (8 users, metres and
seconds) into WORKDIR (default: a new temporary directory), creates a ledger,
releases the curves with ε = 0.5 per curve, reruns the same release with ε
given as the string "1/2" (the same exact amount, so the same release: nothing
more is charged), and audits the ledger. `tests/flows/test_python_api.py` runs
this file.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from data.synthetic import trajectories
from flows import audit, release_curves
from ledger import Ledger
from schemas.policy import load_policy

POLICY = """
[domains.tracks]
kind = "curves"
notion = "gp"          # ε-geo-privacy w.r.t. L2 over metres x seconds^(1/2)
cap = "2"              # per user
time_unit = "s"
value_columns = ["x", "y"]
value_unit = "m"

[domains.tracks.public]
duration = true        # each curve's duration and number of points are released as-is
points = true
"""


def main(work: Path) -> None:
    """Run the example in `work`."""
    work.mkdir(parents=True, exist_ok=True)
    policy = work / "policy.toml"
    policy.write_text(POLICY)
    tracks = work / "tracks.csv"
    trajectories(8, seed=1, n_points=300).to_csv(tracks, index=False)
    ledger = work / "ledger.duckdb"
    Ledger.init(ledger).apply_policy(load_policy(policy))

    res = release_curves(tracks, domain="tracks", epsilon=0.5, ledger_path=ledger,
                         policy_path=policy, out_dir=work / "out")
    counts = res["manifest"]["counts"]
    print(f"release {res['release_id']}: {counts['users_released']} users released, "
          f"{counts['users_denied']} denied; report: {res['report']}")

    again = release_curves(tracks, domain="tracks", epsilon="1/2", ledger_path=ledger,
                           policy_path=policy, out_dir=work / "out")
    print(f"rerun with epsilon='1/2': release {again['release_id']} "
          f"({'the same release' if again['release_id'] == res['release_id'] else 'NEW'})")

    result = audit(ledger_path=ledger, out_dir=work / "out")
    print(f"audit: ledger {'verifies' if result['ok'] else 'DOES NOT VERIFY'}; "
          f"report: {result['report']}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="privpipe-")))
