"""`privpipe serve`: run the release flows on cron schedules.

Schedules come from a TOML file (``--config``), one ``[[release]]`` table per
scheduled release::

    [[release]]
    name = "daily-ais"                 # deployment name
    flow = "release_curves"            # release_curves | release_streams | audit
    cron = "0 2 * * *"                 # 5-field cron, evaluated in `timezone`
    timezone = "UTC"
    [release.parameters]               # the flow's parameters
    input_path = "/data/ais/latest.csv"
    domain = "ais_tracks"
    epsilon = "0.05"
    ledger_path = "/var/lib/privpipe/ledger.duckdb"

Each scheduled run derives its release id from the scheduled date, so a
retried or re-triggered run of the same day reuses the same id (no second
charge) and the next day's run is a new release.

Schedules do not fire on Prefect's temporary server (its scheduler does not
run): `serve` uses PREFECT_API_URL when set, and otherwise starts
``prefect server start`` on 127.0.0.1 and points itself at it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import tomllib
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from schemas.errors import PolicyError, Problem

FLOWS = ("release_curves", "release_streams", "audit")


@dataclass(frozen=True)
class ScheduledRelease:
    """One scheduled deployment read from the schedules file."""

    name: str
    flow: str
    cron: str
    timezone: str = "UTC"
    parameters: dict[str, Any] = field(default_factory=dict)


def load_schedules(path: str | Path) -> list[ScheduledRelease]:
    """Read and validate a schedules TOML file (errors name the key and allowed values)."""
    p = Path(path)

    def fail(key: str, msg: str) -> PolicyError:
        return PolicyError(Problem(str(p), None, key, "schedule", msg))

    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except OSError as err:
        raise fail("<file>", f"cannot read: {err.strerror}") from None
    except tomllib.TOMLDecodeError as err:
        raise fail("<file>", f"not valid TOML: {err}") from None
    entries = data.get("release")
    if not isinstance(entries, list) or not entries:
        raise fail("release", "needs at least one [[release]] table")
    out: list[ScheduledRelease] = []
    for i, e in enumerate(entries):
        k = f"release[{i}]"
        if not isinstance(e.get("name"), str) or not e["name"]:
            raise fail(f"{k}.name", "is required: a deployment name")
        if e.get("flow") not in FLOWS:
            raise fail(f"{k}.flow", f"must be one of {', '.join(FLOWS)}")
        cron = e.get("cron")
        if not isinstance(cron, str) or len(cron.split()) != 5:
            raise fail(f"{k}.cron", "must be a 5-field cron string, e.g. \"0 2 * * *\"")
        params = e.get("parameters", {})
        if not isinstance(params, dict):
            raise fail(f"{k}.parameters", "must be a table of flow parameters")
        out.append(ScheduledRelease(e["name"], e["flow"], cron, e.get("timezone", "UTC"), params))
    return out


def build_deployments(schedules: list[ScheduledRelease]) -> list[Any]:
    """Turn schedules into Prefect deployments (`flow.to_deployment`)."""
    from prefect.schedules import Cron

    from flows.audit import audit
    from flows.release import release_curves, release_streams

    flows = {"release_curves": release_curves, "release_streams": release_streams,
             "audit": audit}
    return [flows[s.flow].to_deployment(name=s.name, schedule=Cron(s.cron, timezone=s.timezone),
                                        parameters=s.parameters) for s in schedules]


def ensure_server(port: int = 4200, timeout: float = 90.0) -> subprocess.Popen[bytes] | None:
    """Use PREFECT_API_URL if set; otherwise start a Prefect server on loopback."""
    if os.environ.get("PREFECT_API_URL"):
        return None
    url = f"http://127.0.0.1:{port}/api"
    proc = subprocess.Popen(  # noqa: S603 - fixed argv, our own interpreter
        [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
         "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as r:  # noqa: S310
                if r.status == 200:
                    os.environ["PREFECT_API_URL"] = url
                    return proc
        except OSError:
            time.sleep(1)
        if proc.poll() is not None:
            break
    proc.terminate()
    raise RuntimeError(f"the Prefect server did not start on 127.0.0.1:{port}")
