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


KEYED = "fingerprint (keyed by the ledger)"
LOCAL = "content sha256"


def _validated_fingerprint(path, policy_file, ledger=None) -> str:
    args = ["validate", str(path), "--kind", "curves", "--policy", str(policy_file),
            "--domain", "tracks", "--format", "json"]
    r = runner.invoke(app, args + (["--ledger", str(ledger)] if ledger else []))
    label = KEYED if ledger else LOCAL
    rows = json.loads(r.stdout)  # valid: summary rows; with rejections: the problems
    if r.exit_code == 0:
        return next(row["value"] for row in rows if row["field"].startswith(label))
    assert r.exit_code == 2 and rows and all("rule" in row for row in rows)
    assert label in r.stderr, r.stderr
    return r.stderr.rsplit(": ", 1)[1].split()[0]


def test_validate_and_release_print_the_same_fingerprint(tmp_path, curves_csv, policy_file,
                                                         ledger_path):
    # One user with a NaN row is rejected: the fingerprint covers that too, the same way.
    df = pd.read_csv(curves_csv)
    df.loc[df.index[df.user_id == "user-2"][3], "x"] = float("nan")
    path = tmp_path / "with_rejection.csv"
    df.to_csv(path, index=False)
    validated = _validated_fingerprint(path, policy_file, ledger_path)
    assert len(validated) == 64
    assert _validated_fingerprint(path, policy_file) != validated  # the raw content hash

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


def test_a_published_fingerprint_does_not_tell_neighbouring_inputs_apart(
        tmp_path, curves_csv, policy_file, ledger_path):
    """Attack: hash two candidate inputs (one value differs) and compare with the manifest.

    Without the ledger's key neither candidate's hash matches what the release
    published, nor does the release id derived from it; with the key
    (`validate --ledger`) the released one is identified, as the operator needs.
    """
    df = pd.read_csv(curves_csv)
    b = tmp_path / "b.csv"
    df.loc[5, "x"] += 1e-3
    df.to_csv(b, index=False)
    r = runner.invoke(app, ["release", "curves", str(b), "--domain", "tracks", "--epsilon",
                            "1/4", "--policy", str(policy_file), "--ledger", str(ledger_path),
                            "--out", str(tmp_path / "out"), "--format", "json"])
    assert r.exit_code == 0, r.output
    row = json.loads(r.stdout)[0]
    published = json.loads((tmp_path / "out" / row["release_id"] / "manifest.json")
                           .read_text())["input_fingerprint"]
    hashes = {p: _validated_fingerprint(p, policy_file) for p in (curves_csv, b)}
    assert published not in hashes.values()
    from flows.release import default_release_id

    params = json.loads((tmp_path / "out" / row["release_id"] / "manifest.json")
                        .read_text())["parameters"]
    # the default (ad-hoc) release id derives from the tag, not from the content hash
    assert default_release_id("release_curves", "tracks", published, params) == row["release_id"]
    for h in hashes.values():
        assert default_release_id("release_curves", "tracks", h, params) != row["release_id"]
    assert _validated_fingerprint(b, policy_file, ledger_path) == published
    assert _validated_fingerprint(curves_csv, policy_file, ledger_path) != published
