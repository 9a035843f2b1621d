"""An auditor process for the load test: reads the ledger in a loop until told to stop.

    python audit_reader.py LEDGER STOPFILE REPORTFILE

Each round verifies the chain and balances, reads every balance, the releases
and the denials, and checks that no account is above its cap. Writes a JSON
report (rounds, failures) and exits 1 when any round failed.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def main(ledger_path: str, stop_file: str, report_file: str) -> int:
    """Read until `stop_file` exists; write the report; 0 when every round was clean."""
    from ledger import Ledger

    rounds, failures = 0, []
    while True:
        stop = Path(stop_file).exists()
        try:
            led = Ledger(ledger_path, lock_timeout=120)
            rep = led.verify()
            if not rep.ok:
                failures.append(f"verify: {rep.message}")
            for row in led.balances():
                if row["spent"] > row["cap"]:
                    failures.append(f"over cap: {row['user_id']} {row['domain']} {row['spent']}")
            led.releases()
            led.denials()
            rounds += 1
        except Exception as err:  # noqa: BLE001 - every failure is reported, none hidden
            failures.append(f"{type(err).__name__}: {err}")
        if stop:
            break
        time.sleep(0.2)
    Path(report_file).write_text(json.dumps({"rounds": rounds, "failures": failures}))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
