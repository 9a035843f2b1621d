"""Secrets and raw values never leave where they belong.

A curves and a streams release (real CLI subprocesses against the shared
Prefect test server, --verbose so Prefect's logs go to its database), an audit
and a failing release; then every file under the output directory, Prefect's
SQLite database (and its WAL) and the captured stdout/stderr are searched for
the noise key (raw, hex, base64), the per-user noise seeds (decimal, hex, raw
bytes) and planted sentinel input values (text and float64 bytes).
"""

from __future__ import annotations

import base64
import os
import struct
from pathlib import Path

import harness
import pandas as pd
import pytest
from typer.testing import CliRunner

from flows.cli import app
from ledger import Ledger

CURVE_SENTINEL = 123456.789012
STREAM_SENTINEL = 7.654321          # in the domain's range [0, 10]: released (with noise)
REJECTED_SENTINEL = 987654.321098   # out of range: its user is rejected


def _needles_for_value(v: float) -> list[bytes]:
    return [f"{v:.6f}".encode(), repr(v).encode(), struct.pack("<d", v), struct.pack(">d", v)]


def _prefect_db_files() -> list[Path]:
    from prefect.settings import get_current_settings

    url = get_current_settings().server.database.connection_url
    text = url.get_secret_value() if hasattr(url, "get_secret_value") else str(url)
    path = Path(text.split("///", 1)[-1])
    return [p for p in (path, Path(str(path) + "-wal"), Path(str(path) + "-journal"))
            if p.exists()]


@pytest.fixture(scope="module")
def leak_run(setup, tmp_path_factory):
    root = tmp_path_factory.mktemp("leak")
    home = root / "home"
    ledger = harness.clone_ledger(setup.template, home)
    curves = harness.write_curves_csv(root / "curves.csv", sentinel=CURVE_SENTINEL)
    streams = harness.write_streams_csv(root / "streams.csv", sentinel=STREAM_SENTINEL)
    df = pd.read_csv(streams)
    df.loc[df.index[-1], "value"] = REJECTED_SENTINEL     # last user: out of range
    df.to_csv(streams, index=False, float_format="%.6f")
    out = root / "out"
    env = harness.cli_env(home, api_url=setup.api_url)
    runs = []
    for kind, inp, rid in (("curves", curves, "leak-c"), ("streams", streams, "leak-s")):
        args = harness.release_args(kind, inp, rid, out, ledger, setup.policy)
        runs.append(harness.run_cli([*args, "--verbose"], env, cwd=root))
    runs.append(harness.run_cli(["audit", "--out", str(out / "audit"), "--ledger", str(ledger),
                                 "--verbose"], env, cwd=root))
    bad = harness.release_args("curves", curves, "leak-bad", out, ledger, setup.policy)
    bad[bad.index("1/2")] = "-1"
    runs.append(harness.run_cli(bad, env, cwd=root))
    led = Ledger(ledger)
    seeds = []
    for rid, inp, domain in (("leak-c", curves, "tracks"), ("leak-s", streams, "meters")):
        # the seeds the release drew from: over each user's data fingerprint and the
        # release's parameters (as the manifest records them)
        import json

        from ingest import scan
        from schemas.policy import load_policy

        fps = scan(inp, load_policy(setup.policy).domain(domain)).user_fingerprints
        params = json.loads((out / rid / "manifest.json").read_text())["parameters"]
        seeds += list(led.noise_seeds(rid, list(fps), list(fps.values()), params).values())
    assert len(seeds) == 6 + 3  # the out-of-range meter is rejected: no seed drawn
    key = bytes.fromhex(Path(str(ledger) + ".key").read_text().strip())
    sign = bytes.fromhex(Path(str(ledger) + ".sign").read_text().strip())
    return {"root": root, "out": out, "runs": runs, "key": key, "seeds": seeds,
            "ledger": ledger, "signing_key": sign}


def _haystacks(leak_run) -> dict[str, bytes]:
    hay = {str(p): p.read_bytes() for p in leak_run["out"].rglob("*") if p.is_file()}
    for p in _prefect_db_files():
        hay[str(p)] = p.read_bytes()
    for i, r in enumerate(leak_run["runs"]):
        hay[f"run{i}.stdout"] = r.stdout.encode()
        hay[f"run{i}.stderr"] = r.stderr.encode()
    return hay


def test_the_runs_did_what_the_search_assumes(leak_run):
    c, s, audit, bad = leak_run["runs"]
    assert c.returncode == 0 and s.returncode == 0, (c.stderr, s.stderr)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert bad.returncode == 2 and "epsilon" in (bad.stdout + bad.stderr).lower()
    dbs = _prefect_db_files()
    assert dbs, "Prefect's database was not found: the search would be vacuous"
    # the runs' flow parameters are in that database, so it is the one they wrote to
    assert any(b"leak-c" in p.read_bytes() for p in dbs)
    # the rejected user is reported (without its value) and has no output
    files = {p.name for p in leak_run["out"].rglob("*") if p.is_file()}
    assert {"values.parquet", "samples.parquet", "report.html", "manifest.json"} <= files


def test_noise_key_never_leaves_the_key_file(leak_run):
    key = leak_run["key"]
    needles = [key, key.hex().encode(), key.hex().upper().encode(), base64.b64encode(key),
               base64.urlsafe_b64encode(key), base64.b64encode(key).rstrip(b"=")]
    for name, data in _haystacks(leak_run).items():
        for n in needles:
            assert n not in data, f"noise key found in {name}"


def test_signing_key_never_leaves_its_file(leak_run):
    key = leak_run["signing_key"]
    needles = [key, key.hex().encode(), key.hex().upper().encode(), base64.b64encode(key)]
    hay = _haystacks(leak_run)
    hay["ledger"] = Path(leak_run["ledger"]).read_bytes()
    for name, data in hay.items():
        for n in needles:
            assert n not in data, f"the signing key found in {name}"


def test_noise_seeds_never_leave_the_process(leak_run):
    needles = []
    for s in leak_run["seeds"]:
        raw = s.to_bytes(32, "big")
        needles += [str(s).encode(), f"{s:064x}".encode(), raw]
    for name, data in _haystacks(leak_run).items():
        for n in needles:
            assert n not in data, f"a noise seed found in {name}"


def test_no_staging_data_is_left_behind(leak_run):
    # staging holds raw chunks and seed files; a completed release removes it
    left = [p for p in leak_run["out"].rglob("*") if ".staging" in p.parts and p.is_file()]
    assert left == []


@pytest.mark.parametrize("value", [CURVE_SENTINEL, STREAM_SENTINEL, REJECTED_SENTINEL])
def test_raw_values_never_reach_reports_logs_or_prefect(leak_run, value):
    for name, data in _haystacks(leak_run).items():
        for n in _needles_for_value(value):
            assert n not in data, f"raw value {value} found in {name}"


def test_validate_shows_raw_values_only_when_asked(leak_run, setup):
    streams = next(leak_run["root"].glob("streams.csv"))
    base = ["validate", str(streams), "--kind", "streams", "--policy", str(setup.policy)]
    quiet = CliRunner().invoke(app, base)
    assert quiet.exit_code == 2 and "meter-3" in quiet.output
    assert f"{REJECTED_SENTINEL:.6f}"[:8] not in quiet.output
    loud = CliRunner().invoke(app, [*base, "--show-values", "--format", "csv"])
    assert loud.exit_code == 2 and "987654.3" in loud.output


def test_key_with_wide_permissions_stops_a_release_with_exit_2(setup, tmp_path):
    ledger = harness.clone_ledger(setup.template, tmp_path / "home")
    os.chmod(Path(str(ledger) + ".key"), 0o644)
    res = CliRunner().invoke(app, harness.release_args(
        "curves", setup.inputs["curves"], "perm", tmp_path / "out", ledger, setup.policy))
    assert res.exit_code == 2, res.output
    assert "0644" in res.output and "chmod 600" in res.output
    assert not (tmp_path / "out" / "perm").exists()
