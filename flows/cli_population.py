"""``privpipe population``: the population view of a finished stream release.

Post-processing of the release's privatized samples only (no ledger, no raw
data, nothing charged): for all released users, or a chosen group of at least
``--min-users`` of them, the per-step (and with ``--period`` per-phase) mean
with a confidence band and the per-step distribution (Square Wave EM/EMS), as
CSV tables and a plot in the domain's units. Exit code 0, or 2 for bad input
(not a stream release, unknown domain, a group smaller than ``--min-users``).
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from flows.cli_common import console, handle_errors
from flows.settings import BUNDLED_POLICY
from schemas.errors import ParameterError
from schemas.policy import load_policy


@handle_errors
def population_cmd(
    release_dir: Path = typer.Argument(..., help="A stream release's output folder "
                                       "(OUT/<release_id>, with manifest.json)."),
    users: Path | None = typer.Option(None, "--users", help="Text file of user ids (one a "
                                      "line): the group to describe (default: all users)."),
    min_users: int = typer.Option(20, "--min-users", help="Smallest group described (k)."),
    period: int | None = typer.Option(None, "--period", help="Public period in steps for the "
                                      "per-phase tables (e.g. 48 half-hours)."),
    confidence: float = typer.Option(0.95, "--confidence", help="Level of the bands."),
    out: Path | None = typer.Option(None, "--out", help="Where to write (default: the release "
                                    "folder for all users, RELEASE/population-group otherwise)."),
    policy: Path | None = typer.Option(None, "--policy", help="Policy TOML with the domain "
                                       "(its value range and unit); default the bundled one."),
) -> None:
    """Describe the population of a stream release (post-processing; charges nothing)."""
    from mechanisms.cost import epsilon_per_step, exact, float_at_most
    from tasks.population import population_view_fn

    manifest_path = release_dir / "manifest.json"
    if not manifest_path.is_file():
        raise ParameterError(f"{manifest_path}: not a release folder (no manifest.json)")
    man = json.loads(manifest_path.read_text())
    if man.get("flow") != "release_streams" or "samples" not in (man.get("files") or {}):
        raise ParameterError(f"{release_dir}: not a stream release with samples")
    params = man["parameters"]
    dom = load_policy(policy or BUNDLED_POLICY).domain(man["domain"])
    group = None
    if users is not None:
        group = [u.strip() for u in users.read_text().splitlines() if u.strip()]
    dest = out or (release_dir if group is None else release_dir / "population-group")
    res = population_view_fn(
        str(release_dir / man["files"]["samples"]), str(dest),
        epsilon_per_step=float_at_most(epsilon_per_step(exact(params["epsilon"]),
                                                         int(params["w"]))),
        value_range=dom.value_range, value_unit=dom.value_unit, period=period, users=group,
        min_users=min_users, confidence=confidence)
    console.print(f"population view of {res['group']} ({res['users']} users, {res['reports']} "
                  f"reports) written to {dest}: " + ", ".join(res["files"].values()))
