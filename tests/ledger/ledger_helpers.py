"""Helpers shared by the ledger tests (imported by test modules and conftest)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

# curves domains declare what they release outside the noise
PUBLIC = {"public": {"duration": True, "points": True}}

REPO = Path(__file__).resolve().parents[2]

POLICY = {
    "domains": {
        "ais": {"kind": "curves", **PUBLIC, "notion": "gp", "cap": "1.0",
                "value_columns": ["x", "y"],
                "value_unit": "m"},
        "ecg": {"kind": "curves", **PUBLIC, "notion": "cgp", "cap": "1/2", "value_unit": "mV"},
        "power": {"kind": "streams", "notion": "wevent", "cap": "1", "w": 4,
                  "value_range": [0.0, 1.0], "value_unit": "MW"},
    }
}

POLICY_ENTRIES = 3
"""Entries `apply_policy(POLICY)` writes on a new ledger: one ``policy`` entry per domain."""

POLICY_TOML = """
[domains.ais]
kind = "curves"
public = { duration = true, points = true }
notion = "gp"
cap = "1.0"
value_columns = ["x", "y"]
value_unit = "m"

[domains.ecg]
kind = "curves"
public = { duration = true, points = true }
notion = "cgp"
cap = "1/2"
value_unit = "mV"

[domains.power]
kind = "streams"
notion = "wevent"
cap = "1"
w = 4
value_range = [0.0, 1.0]
value_unit = "MW"
"""


def subprocess_env() -> dict[str, str]:
    """Environment for child processes: the working tree first on the import path."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


PYTHON = sys.executable


def load_fixture(name: str, path: Path) -> Path:
    """Build a ledger file at `path` from a `tests/ledger/data/<name>` export (and its key).

    The exports are ``EXPORT DATABASE ... (FORMAT csv)`` of ledgers written by
    earlier privpipe versions (see the README in `tests/ledger/data/`).
    """
    import shutil

    import duckdb

    src = REPO / "tests" / "ledger" / "data" / name
    con = duckdb.connect(str(path))
    try:
        con.execute((src / "schema.sql").read_text(encoding="utf-8"))
        con.execute((src / "load.sql").read_text(encoding="utf-8").replace("{dir}", str(src)))
    finally:
        con.close()
    key = path.with_name(path.name + ".key")
    shutil.copyfile(src / "ledger.duckdb.key", key)
    os.chmod(key, 0o600)
    return path


def ledger_cli(*args: object) -> tuple[int, str]:
    """Run ``privpipe ledger ARGS`` in this process: (exit code, output); never a traceback."""
    from typer.testing import CliRunner

    from flows.cli_ledger import ledger_app

    res = CliRunner().invoke(ledger_app, [str(a) for a in args])
    assert "Traceback" not in res.output
    return res.exit_code, res.output


def chain_of(path: Path) -> list[tuple[int, str]]:
    """(seq, hash) of every entry, read as the ledger reads (retrying on a writer's lock)."""
    from ledger.storage import Store

    return Store(path, 60.0, read_only=True).transact(
        lambda con: con.execute("SELECT seq, hash FROM entries ORDER BY seq").fetchall(),
        write=False)


def sha_of(path: Path) -> str:
    """SHA-256 of a file's bytes."""
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def charge_ais(led: object, rid: str, user: str = "u", amount: float = 0.125) -> None:
    """Reserve `amount` for `user` in domain ais under release `rid`."""
    from ledger import Request

    led.reserve(rid, [Request(user, "ais", amount=amount)], mechanism="m",  # type: ignore[attr-defined]
                parameters={})


def copy_tree(src: Path, dst: Path) -> Path:
    """Copy a directory built once per module (a ledger, its keys, pin, counter; modes kept).

    The per-test fixtures that attack a ledger start from such a copy instead of
    rebuilding the same ledger through the same calls for every test.
    """
    import shutil

    shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True)
    return dst
