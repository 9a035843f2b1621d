"""The evaluate flow on bundled public data (no ledger, nothing charged)."""

from pathlib import Path

from flows.evaluate import evaluate


def test_evaluate_writes_report_and_mechanism_beats_baseline_on_ais(tmp_path):
    res = evaluate(out_dir=str(tmp_path), epsilons=[0.1], seed=1, n_curves=2)
    rows = res["rows"]
    assert {r["data"] for r in rows} == {"AIS trajectories (m, s)", "ECG records (mV, s)",
                                         "taylor stream (w=5)"}
    ais = next(r for r in rows if r["data"].startswith("AIS"))
    # PrivFuncSeg is >10x better than the baseline at ε = 0.1 m^-1 s^-1/2 (benchmarks/curves)
    assert float(ais["mechanism error"]) < float(ais["baseline (k=N/10, s=k/20) error"])
    out = tmp_path / "evaluate"
    assert Path(res["report"]).exists()
    assert (out / "plots").is_dir() and len(list((out / "plots").glob("*.png"))) == 3
    assert "raw" in (out / "report.md").read_text()
