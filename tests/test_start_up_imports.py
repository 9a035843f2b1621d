"""What a curve release's process imports: none of the stream-only modules.

`privpipe release curves` imports `flows.release`; the stream post-processing
(`tasks.population_scan`, `mechanisms.reconstruct`, with scipy.signal and
scipy.stats: about 0.5 s of every curve command's start-up) is imported only
where a stream release uses it. Checked in a fresh interpreter, since this
test process has imported everything already. Speed itself is measured in
benchmarks/cli/bench_cli.py, not here.
"""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STREAM_ONLY = ("tasks.population_scan", "mechanisms.reconstruct", "scipy.signal", "scipy.stats")


def test_the_cli_and_the_release_flows_do_not_import_the_stream_post_processing():
    code = ("import sys, flows.cli, flows.release, flows.cli_release; "
            f"print(' '.join(m for m in {STREAM_ONLY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True, timeout=120).stdout.strip()
    assert out == "", f"imported at start-up: {out}"
