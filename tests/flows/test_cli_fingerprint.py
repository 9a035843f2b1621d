"""One fingerprint: `validate` prints what `release` records, and report and manifest show.

On main `validate` and `release` printed different digests for the same file
(the release hashed its own stream of rejection and user markers), so an
auditor could not link a validated file to its release.
"""

from __future__ import annotations

import json

import pandas as pd
from typer.testing import CliRunner

from flows.cli import app

runner = CliRunner()


def _validated_fingerprint(path, policy_file) -> str:
    r = runner.invoke(app, ["validate", str(path), "--kind", "curves", "--policy",
                            str(policy_file), "--domain", "tracks", "--format", "json"])
    rows = json.loads(r.stdout)  # valid: summary rows; with rejections: the problems
    if r.exit_code == 0:
        return next(row["value"] for row in rows if row["field"] == "fingerprint (sha256)")
    assert r.exit_code == 2 and rows and all("rule" in row for row in rows)
    return r.stderr.rsplit("fingerprint (sha256): ", 1)[1].split()[0]


def test_validate_and_release_print_the_same_fingerprint(tmp_path, curves_csv, policy_file,
                                                         ledger_path):
    # One user with a NaN row is rejected: the fingerprint covers that too, the same way.
    df = pd.read_csv(curves_csv)
    df.loc[df.index[df.user_id == "user-2"][3], "x"] = float("nan")
    path = tmp_path / "with_rejection.csv"
    df.to_csv(path, index=False)
    validated = _validated_fingerprint(path, policy_file)
    assert len(validated) == 64

    r = runner.invoke(app, ["release", "curves", str(path), "--domain", "tracks", "--epsilon",
                            "1/4", "--policy", str(policy_file), "--ledger", str(ledger_path),
                            "--out", str(tmp_path / "out"), "--format", "json"])
    assert r.exit_code == 0, r.output
    row = json.loads(r.stdout)[0]
    assert row["rejected"] == 1 and row["fingerprint"] == validated
    rdir = tmp_path / "out" / row["release_id"]
    assert json.loads((rdir / "manifest.json").read_text())["input_fingerprint"] == validated
    assert validated in (rdir / "report.md").read_text()

    from ledger import Ledger

    stored = Ledger(ledger_path).release(row["release_id"])["manifest"]["input_fingerprint"]
    assert stored == validated


def test_fingerprint_changes_with_the_rejected_set(tmp_path, curves_csv, policy_file):
    clean = _validated_fingerprint(curves_csv, policy_file)
    df = pd.read_csv(curves_csv)
    df.loc[df.index[df.user_id == "user-4"][0], "y"] = float("inf")
    path = tmp_path / "one_bad.csv"
    df.to_csv(path, index=False)
    assert _validated_fingerprint(path, policy_file) != clean
