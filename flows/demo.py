"""The demo behind `make run`: a full release cycle on the bundled data.

Initialises an embedded ledger (idempotent), applies the bundled policy,
releases the AIS trajectories (PrivFuncSeg), the ECG records
(Project-and-Privatize, sinc basis) and the two electricity streams (Square
Wave + CPR), then audits. Release ids are deterministic, so running the demo
again on the same ledger reproduces the same outputs and charges nothing more.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from data.loaders import write_demo_inputs
from flows.settings import BUNDLED_POLICY
from ledger import Ledger
from reports.release_sections import WITHHELD
from schemas.policy import load_policy

# Public, documented demo parameters. ε values are in each domain's units
# (see data/policy.toml): trajectories in metres x seconds^(1/2), ECG in
# mV x seconds^(1/2), streams per window of w steps.
DEMO_RELEASES: list[dict[str, Any]] = [
    {"label": "AIS trajectories (PrivFuncSeg)", "kind": "curves", "input": "ais_tracks",
     "domain": "ais_tracks", "mechanism": "privfuncseg", "epsilon": "0.05",
     "options": {"basis": "linear"}},
    {"label": "ECG records (Project-and-Privatize, sinc basis)", "kind": "curves",
     "input": "ecg", "domain": "ecg", "mechanism": "project_and_privatize", "epsilon": "2000",
     "options": {"basis": "sinc", "n_terms": 500, "spacing": 0.02, "first": 0}},
    {"label": "Electricity demand, England & Wales (Square Wave + CPR)", "kind": "streams",
     "input": "power_taylor", "domain": "power_taylor", "epsilon": "5"},
    {"label": "Electricity demand, Italy (Square Wave + CPR)", "kind": "streams",
     "input": "power_italy", "domain": "power_italy", "epsilon": "5"},
    {"label": "Household meters, 2000 homes x 7 days (Square Wave + CPR + population view)",
     "kind": "streams", "input": "households", "domain": "households", "epsilon": "5",
     "population_period": 48},
]


def prepare_demo(out_dir: str | Path, ledger_path: str | Path, *,
                 policy_path: str | Path = BUNDLED_POLICY) -> dict[str, Path]:
    """Initialise the ledger with the policy and write the demo inputs; charge nothing.

    Idempotent. The bundled deployments (prefect.yaml) run this as a pull step,
    so they release the bundled data.

    Returns:
        Domain name -> input CSV under ``OUT_DIR/inputs``.
    """
    Ledger.init(ledger_path).apply_policy(load_policy(policy_path))
    return write_demo_inputs(Path(out_dir) / "inputs")


def run_demo(out_dir: str | Path, ledger_path: str | Path, *,
             policy_path: str | Path = BUNDLED_POLICY, task_runner: str = "threads",
             on_step: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """Run the demo; return one row per step with the report path."""
    from flows.audit_flow import audit
    from flows.release import release_curves, release_streams
    from flows.runners import make_task_runner

    out = Path(out_dir)
    step = on_step or (lambda _label: None)
    step("initialising the ledger and applying the bundled policy")
    inputs = prepare_demo(out, ledger_path, policy_path=policy_path)
    rows: list[dict[str, Any]] = []
    runner = make_task_runner(task_runner)
    for spec in DEMO_RELEASES:
        step(spec["label"])
        common = {"input_path": str(inputs[spec["input"]]), "domain": spec["domain"],
                  "out_dir": str(out), "ledger_path": str(ledger_path),
                  "policy_path": str(policy_path)}
        if spec["kind"] == "curves":
            res = release_curves.with_options(task_runner=runner)(
                mechanism=spec["mechanism"], epsilon=spec["epsilon"],
                options=spec["options"], **common)
        else:
            res = release_streams.with_options(task_runner=runner)(
                epsilon=spec["epsilon"], population_period=spec.get("population_period"),
                **common)
        counts = res["manifest"]["counts"]
        rows.append({"step": spec["label"], "release_id": res["release_id"],
                     "released": counts["users_released"], "denied": counts["users_denied"],
                     "rejected": counts.get("users_rejected", WITHHELD), "report": res["report"]})
    step("auditing the ledger")
    result = audit(ledger_path=str(ledger_path), out_dir=str(out))
    rows.append({"step": "Compliance audit", "release_id": "",
                 "released": "", "denied": result["denials"],
                 "rejected": "", "report": result["report"],
                 "verified": "yes" if result["ok"] else "NO"})
    return rows
