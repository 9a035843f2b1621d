"""Post-processing of a finished stream release: history progress and population view.

Both read only the release's (and earlier releases') privatized outputs and
public parameters, and charge nothing. The release flow calls
`stream_post_processing` once its Parquet outputs are in place; what it
returns goes into the manifest (``history``, ``population``) and the report.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from mechanisms import registry
from tasks.population import population_view_fn
from tasks.population_scan import ScanSums
from tasks.stream_progress import history_progress

#: a population view needs at least this many released users unless told otherwise
MIN_USERS = 20


def stream_post_processing(rdir: str, *, epsilon_per_step: float,
                           history: list[dict[str, Any]], value_range: tuple[float, float] | None,
                           history_skipped: list[dict[str, Any]] | None = None,
                           value_unit: str, population_period: int | None,
                           min_users: int = MIN_USERS,
                           users_released: int = 0,
                           mechanism: str = "square_wave",
                           summed: ScanSums | None = None) -> dict[str, Any]:
    """Run the history progress and the population view of one stream release.

    `summed`: the release's reports summed as its chunks were written (the
    population view then reads no reports back). Privacy: post-processing of
    released ε-w-event LDP reports; charges nothing. Cost: a few CPR runs per
    sampled stream and history prefix, plus O(reports) for the population
    tables. Both read reports of the Square Wave
    law (CPR, EM): a release of a mechanism whose registry entry does not list
    ``"cpr"`` skips them, saying so.
    """
    if "cpr" not in registry.stream(mechanism).reconstructions:
        why = f"mechanism {mechanism!r} reports are not of the Square Wave law"
        return {"population": {"skipped": why},
                **({"history": {"releases": [h["release_id"] for h in history],
                                "skipped": list(history_skipped or []), "progress": []}}
                   if history or history_skipped else {})}
    samples = str(Path(rdir) / "samples.parquet")
    out: dict[str, Any] = {}
    if history or history_skipped:
        out["history"] = {
            "releases": [h["release_id"] for h in history],
            "skipped": list(history_skipped or []),
            "progress": history_progress(samples, [h["samples"] for h in history],
                                         epsilon_per_step, [h["release_id"] for h in history])
            if history else [],
        }
    if users_released >= min_users:
        out["population"] = population_view_fn(
            samples, rdir, epsilon_per_step=epsilon_per_step, value_range=value_range,
            value_unit=value_unit, period=population_period, min_users=min_users,
            summed=summed)
    else:
        out["population"] = {"skipped": f"fewer than {min_users} released users"}
    return out


# No cache policy: `summed` holds a DuckDB connection, which Prefect must not hash.
stream_post = task(stream_post_processing, name="stream-post-processing", persist_result=False,
                   cache_policy=NO_CACHE)


def report_lines(manifest: dict[str, Any]) -> list[str]:
    """Markdown of the history and population sections of a stream release report."""
    from reports.render import md_table
    from tasks.stream_progress import progress_columns

    lines: list[str] = []
    per = manifest.get("periods") or []
    if per:
        found: dict[int, int] = {}
        for p in per:
            if p.get("period") is not None:
                found[int(p["period"])] = found.get(int(p["period"]), 0) + 1
        lines += ["", f"CPR found a significant period in {sum(found.values())} of {len(per)} "
                  "streams" + (": " + ", ".join(f"period {k} in {v}" for k, v in
                                                sorted(found.items(), key=lambda kv: -kv[1]))
                               if found else "") + "."]
    hist = manifest.get("history")
    if hist:
        lines += ["", "## Reconstruction from every release so far (post-processing)", "",
                  f"CPR ran on the reports of this release and of {len(hist['releases'])} "
                  "earlier release(s) of the same streams (same ε and w). For a sample of "
                  "streams, the table replays the history: after each release, how many have "
                  "a significant period and how far that reconstruction is from today's.", "",
                  md_table(hist["progress"], progress_columns())]
        if hist.get("skipped"):
            lines += ["Earlier releases not used:", "",
                      md_table(hist["skipped"], ["release_id", "reason"])]
    pop = manifest.get("population") or {}
    if pop.get("files"):
        unit = pop.get("value_unit") or "normalised units"
        lines += ["", "## Population view (post-processing, charges nothing)", "",
                  f"From the reports of {pop['group']} ({pop['users']} users, {pop['reports']} "
                  f"reports): the mean of the users' values per step"
                  + (f" and per phase (step mod {pop['period']})" if pop.get("period") else "")
                  + f" with a {100 * pop['confidence']:g} % band, and the distribution of the "
                  f"values per step (Square Wave EM/EMS), in {unit}. Tables: "
                  + ", ".join(f"`{f}`" for f in pop["files"].values()) + ".", ""]
        lines += [f"![Population view](plots/{name})" for name in pop.get("plots", [])]
    elif pop.get("skipped"):
        lines += ["", f"Population view: skipped ({pop['skipped']}).", ""]
    return lines
