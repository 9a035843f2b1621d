"""The evaluate flow: a domain's mechanism on public or synthetic data, raw against private.

`privpipe evaluate FILE --domain D` evaluates the user's own (public or
synthetic) data under a policy domain; without FILE it evaluates the bundled
public data sets under the bundled policy. It is the only report that plots
raw data. It never opens a ledger and charges nothing (the report says so);
the noise comes from `seed`, not from a release key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from prefect import flow, task

from data import loaders
from flows.demo import DEMO_RELEASES
from flows.run_labels import evaluate_run_name, tag_run
from flows.run_logging import route_run_logs
from flows.settings import BUNDLED_POLICY
from mechanisms import registry
from reports.evaluation_report import Suite, write_evaluation_report
from schemas.errors import ParameterError
from schemas.policy import load_policy
from tasks import evaluation

# Default grids per bundled domain, in each domain's own units (the L2 metric
# scales with value and time units, so one grid cannot serve all of them).
DEFAULT_EPSILONS = {
    "ais_tracks": [0.01, 0.1, 1.0],       # metres x seconds^(1/2)
    "ecg": [500.0, 2000.0, 10000.0],      # mV x seconds^(1/2)
    "power_taylor": [1.0, 3.0, 5.0],      # per window of w = 5 steps
}
_DEMO = {d["domain"]: d for d in DEMO_RELEASES}
# (label, domain of the bundled policy, loader, mechanism, options): the demo's choices.
BUNDLED = [
    ("AIS trajectories, New York Harbor", "ais_tracks", "ais_raw",
     _DEMO["ais_tracks"]["mechanism"], _DEMO["ais_tracks"]["options"]),
    ("ECG, MIT-BIH record 208", "ecg", "ecg_curves", _DEMO["ecg"]["mechanism"],
     _DEMO["ecg"]["options"]),
    ("Electricity demand, England & Wales", "power_taylor", "taylor_stream", "square_wave", {}),
]


def _grid(domain: str, cap: Any, epsilons: list[float] | None) -> list[float]:
    """The ε (or ρ) grid: given, else the bundled default, else the cap / 100, / 10 and x 1."""
    if epsilons:
        return sorted(float(e) for e in epsilons)
    return DEFAULT_EPSILONS.get(domain) or [float(cap) / 100, float(cap) / 10, float(cap)]


def evaluate_suite(label: str, source: str, domain: str, policy_path: str,
                   mechanism: str | None, options: dict[str, Any], epsilons: list[float] | None,
                   seed: int, n_curves: int) -> Suite:
    """Load one input under its policy domain and evaluate the mechanism on each ε.

    `source` is a file path, or ``bundled:LOADER`` for a loader of `data.loaders`
    (paths and names are passed, never data).
    """
    dom = load_policy(policy_path).domain(domain)
    mech = mechanism or ("privfuncseg" if dom.kind == "curves" else "square_wave")
    if dom.kind == "streams" and mech not in registry.names("streams"):
        raise ParameterError(f"domain {domain!r} holds streams: its mechanism is one of "
                             f"{', '.join(registry.names('streams'))}")
    if source.startswith("bundled:"):
        loader = source.removeprefix("bundled:")
        data = evaluation.load(getattr(loaders, loader)(), dom, n_curves)
        source_text = f"bundled public data (data.loaders.{loader})"
    else:
        data, source_text = evaluation.load(source, dom, n_curves), source
    rng = np.random.default_rng(seed)
    outcomes = {}
    for amount in _grid(domain, dom.cap, epsilons) if data.items else []:
        outcomes[amount] = (evaluation.curve_errors(data, dom, mech, options, amount, rng)
                            if dom.kind == "curves" else
                            evaluation.stream_errors(data, dom, amount, rng, mech))
    return Suite(label, source_text, dom, mech, data, outcomes)


evaluate_suite_task = task(evaluate_suite, name="evaluate-suite", persist_result=False)


@flow(name="evaluate", flow_run_name=evaluate_run_name, persist_result=False)
def evaluate(out_dir: str = "out", input_path: str | None = None, domain: str | None = None,
             policy_path: str | None = None, mechanism: str | None = None,
             options: dict[str, Any] | None = None, epsilons: list[float] | None = None,
             seed: int = 0, n_curves: int = 5) -> dict[str, Any]:
    """Evaluate a domain's mechanism on public or synthetic data (no ledger, no charge).

    With `input_path`, `domain` names its policy domain; without, the bundled
    data sets are evaluated under the bundled policy.
    """
    route_run_logs()  # INFO lines reach the API (flows.run_logging)
    tag_run("evaluate", *([f"domain:{domain}"] if domain else []))
    if input_path is not None and not domain:
        raise ParameterError("evaluate FILE needs --domain (the policy domain of its data)")
    if n_curves < 1:
        raise ParameterError("n_curves must be >= 1")
    policy = str(policy_path or BUNDLED_POLICY)
    if input_path is not None:
        suites = [evaluate_suite_task(Path(input_path).name, str(input_path), str(domain),
                                      policy, mechanism, dict(options or {}), epsilons, seed,
                                      n_curves)]
    else:
        suites = [evaluate_suite_task(label, f"bundled:{loader}", name, str(BUNDLED_POLICY),
                                      mech, opts, epsilons, seed, n_curves)
                  for label, name, loader, mech, opts in BUNDLED]
    return write_evaluation_report(out_dir, suites)
