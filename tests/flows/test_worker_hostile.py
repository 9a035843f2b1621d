"""A hostile privpipe worker cannot run code in the flow process nor choose what is published.

The worker here is the test's own HTTP server speaking the wire protocol: it
computes the honest answer (`flows.worker_serve._run_request`) and then
answers something else. Every attack must fail the release cleanly: a
`RemoteResultMismatch` (exit 4) naming the worker, the release recorded as
failed, nothing published, and no code of the worker's run in the flow process
(the pickle bombs would leave a file named after the process id).

Before: with Dask as the runner, the same pickle bomb runs in the flow
process (the strict xfail in tests/flows/test_dask_hostile_worker.py).
"""

from __future__ import annotations

import json
import os
import pickle
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from privpipe_workers import TOKEN

from flows.release import release_curves, release_streams
from flows.runners import make_task_runner
from flows.worker_serve import _run_request
from ledger import Ledger
from tasks.recheck import RemoteResultMismatch
from tasks.wire import MAGIC, ipc_bytes, pack, unpack

pytestmark = pytest.mark.prefect

Answer = tuple[int, bytes]


class _Bomb:
    """Unpickling this runs code: it leaves a file named after the unpickling process."""

    def __init__(self, mark: str) -> None:
        self.mark = mark

    def __reduce__(self):  # noqa: D105
        code = f"import os; open({self.mark!r} + str(os.getpid()), 'w').close()"
        return (exec, (code,))


def _parts(answer: bytes) -> tuple[dict, list[bytes]]:
    header, parts = unpack(answer, max_parts=3)
    header.pop("wire"), header.pop("parts")
    return header, [bytes(p) for p in parts]


def _tables(answer: bytes) -> tuple[dict, dict[str, pa.Table]]:
    header, parts = _parts(answer)
    return header, {n: pa.ipc.open_stream(p).read_all()
                    for n, p in zip(header["tables"], parts, strict=True)}


def _repack(header: dict, tables: dict[str, pa.Table]) -> bytes:
    return pack(header, [ipc_bytes(tables[n]) for n in header["tables"]])


def _set(table: pa.Table, name: str, arr: pa.Array) -> pa.Table:
    return table.set_column(table.column_names.index(name), name, arr)


def _edit(fn: Callable[[dict, dict[str, pa.Table]], None]) -> Callable[[bytes, bytes], Answer]:
    """An attack that edits the honest answer's header and tables."""
    def attack(honest: bytes, mark: bytes) -> Answer:
        header, tables = _tables(honest)
        fn(header, tables)
        return 200, _repack(header, tables)
    return attack


def _first(tables: dict[str, pa.Table]) -> tuple[str, pa.Table]:
    name = "values" if "values" in tables else "samples"
    return name, tables[name]


def _value_col(table: pa.Table) -> str:
    return "y" if "y" in table.column_names else table.column_names[-1]


def _fill(value: float) -> Callable[[dict, dict[str, pa.Table]], None]:
    def fn(header: dict, tables: dict[str, pa.Table]) -> None:
        name, t = _first(tables)
        col = _value_col(t)
        tables[name] = _set(t, col, pa.array(np.full(t.num_rows, value)))
    return fn


def _retype(header: dict, tables: dict[str, pa.Table]) -> None:
    name, t = _first(tables)
    col = _value_col(t)
    tables[name] = _set(t, col, pa.array([str(v) for v in t.column(col).to_pylist()]))


def _extra_column(header: dict, tables: dict[str, pa.Table]) -> None:
    name, t = _first(tables)
    tables[name] = t.append_column("raw", pa.array(np.zeros(t.num_rows)))


def _drop_row(header: dict, tables: dict[str, pa.Table]) -> None:
    name, t = _first(tables)
    tables[name] = t.slice(1)


def _swap_users(header: dict, tables: dict[str, pa.Table]) -> None:
    name, t = _first(tables)
    ids = t.column("user_id").combine_chunks()
    ids = ids.dictionary_decode() if pa.types.is_dictionary(ids.type) else ids
    swapped = pa.array(ids.to_pylist()[::-1], pa.string())
    tables[name] = _set(t, "user_id", swapped.dictionary_encode()
                        if pa.types.is_dictionary(t.schema.field("user_id").type) else swapped)


def _tiny_costs(header: dict, tables: dict[str, pa.Table]) -> None:
    for cost in header["cost_table"]:
        if "runs" in cost:
            cost["runs"] = [[a, b, "1/1000000000"] for a, b, _ in cost["runs"]]
        else:
            cost["items"] = [[s, n, "1/1000000000"] for s, n, _ in cost["items"]]


def _nan_bound(header: dict, tables: dict[str, pa.Table]) -> None:
    header["error_bounds"] = [float("nan")] * len(header["error_bounds"])


def _huge_fraction(header: dict, tables: dict[str, pa.Table]) -> None:
    for cost in header["cost_table"]:
        cost["epsilon" if "runs" in cost else "requested"] = "9" * 5000 + "/7"


def _header_text(honest: bytes, old: bytes, new: bytes) -> Answer:
    """The honest answer with its header's JSON text edited (lengths kept consistent)."""
    start = len(MAGIC) + 8
    size = int.from_bytes(honest[len(MAGIC):start], "big")
    text = honest[start:start + size].replace(old, new, 1)
    return 200, MAGIC + len(text).to_bytes(8, "big") + text + honest[start + size:]


def _pickle_everywhere(honest: bytes, mark: bytes) -> Answer:
    """The pickle bomb in every field: JSON strings, each part, the 422 body."""
    header, parts = _parts(honest)
    text = mark.decode("latin-1")
    header["diagnostics"] = {"note": [text]}
    header["costs"] = [[text, text, 0, text]]
    return 200, pack(header, [mark] * len(parts))


def _pickled_extension_type(honest: bytes, mark: bytes) -> Answer:
    """A column declared as pyarrow's pickle-backed extension type (CVE-2023-47248)."""
    header, tables = _tables(honest)
    name, t = _first(tables)
    field = pa.field("user_id", pa.binary(), metadata={
        b"ARROW:extension:name": b"arrow.py_extension_type",
        b"ARROW:extension:metadata": mark})
    ids = pa.array([b"x"] * t.num_rows, pa.binary())
    tables[name] = t.set_column(0, field, ids)
    return 200, _repack(header, tables)


def _compressed(honest: bytes, mark: bytes) -> Answer:
    """The honest tables, zstd-compressed (a decompression bomb's carrier)."""
    header, tables = _tables(honest)
    parts = []
    for name in header["tables"]:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, tables[name].schema,
                               options=pa.ipc.IpcWriteOptions(compression="zstd")) as writer:
            writer.write_table(tables[name])
        parts.append(sink.getvalue().to_pybytes())
    return 200, pack(header, parts)


def _gzip_bomb(honest: bytes, mark: bytes) -> Answer:
    """64 MiB of zeros gzip-compressed to ~64 KiB, sent as Content-Encoding: gzip."""
    import gzip

    return 200, gzip.compress(b"\0" * 64 * 2**20), ("content-encoding", "gzip")  # type: ignore[return-value]


ATTACKS: dict[str, Callable[[bytes, bytes], Answer]] = {
    "a pickle as the whole answer": lambda honest, mark: (200, mark),
    "a pickle behind the magic": lambda honest, mark: (200, MAGIC + mark),
    "a pickle in every field": _pickle_everywhere,
    "a pickle-backed Arrow extension type": _pickled_extension_type,
    "a pickle as a 422 error": lambda honest, mark: (422, mark),
    "a value column of strings": _edit(_retype),
    "an extra column": _edit(_extra_column),
    "a missing row": _edit(_drop_row),
    "users' rows swapped": _edit(_swap_users),
    "NaN values": _edit(_fill(float("nan"))),
    "infinite values": _edit(_fill(float("inf"))),
    "a NaN error bound": lambda honest, mark: _header_text(honest, b'"error_bounds":[',
                                                          b'"error_bounds":[NaN,'),
    "parts that do not add up": lambda honest, mark: (200, honest + b"\0"),
    "a header longer than the answer": lambda honest, mark: (
        200, MAGIC + (2**62).to_bytes(8, "big") + b"{}"),
    "a deeply nested header": lambda honest, mark: (
        200, MAGIC + (200_000).to_bytes(8, "big") + b"[" * 100_000 + b"]" * 100_000),
    "a huge fraction in a cost": _edit(_huge_fraction),
    "an answer over the size limit": lambda honest, mark: (200, honest + b"\0" * 3 * 2**20),
    "compressed tables": _compressed,
    "a gzip bomb": _gzip_bomb,
    "altered values (424242)": _edit(_fill(424242.0)),
    "tiny costs": _edit(_tiny_costs),
}

#: why each attack fails (a fragment of the error), so none passes for another reason
WHY = {
    "a pickle as the whole answer": "wrong magic",
    "a pickle behind the magic": "the header length exceeds the envelope",
    "a pickle in every field": "not a valid Arrow IPC stream",
    "a pickle-backed Arrow extension type": "user_id: binary",
    "a pickle as a 422 error": "a malformed error answer",
    "a value column of strings": "y: string",
    "an extra column": "raw: double",
    "a missing row": "rows instead of",
    "users' rows swapped": "column 'user_id' is not the chunk's ids",
    "NaN values": "NaN or infinite",
    "infinite values": "NaN or infinite",
    "a NaN error bound": "the header holds NaN",
    "parts that do not add up": "do not add up",
    "a header longer than the answer": "the header length exceeds the envelope",
    "a deeply nested header": "RecursionError",
    "a huge fraction in a cost": "not an exact fraction",
    "an answer over the size limit": "an answer over 2097152 bytes",
    "compressed tables": "compressed IPC buffers",
    "a gzip bomb": "wrong magic",
    "altered values (424242)": "the rows of the sampled users differ",
    "tiny costs": "the costs of the sampled users",
}


@contextmanager
def hostile_worker(attack: Callable[[bytes, bytes], Answer], mark: bytes) -> Iterator[str]:
    """A loopback HTTP server answering each chunk request with `attack(honest answer)`."""
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            body = self.rfile.read(int(self.headers["content-length"]))
            status, honest = _run_request(body)
            status, answer, *headers = (attack(honest, mark) if status == 200
                                        else (status, honest))
            try:
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the flow gave up on this worker (a timeout, an over-long answer)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture()
def client_env(tmp_path, monkeypatch):
    token = tmp_path / "token"
    token.write_text(TOKEN)
    token.chmod(0o600)
    monkeypatch.setenv("PRIVPIPE_WORKER_TOKEN_FILE", str(token))
    monkeypatch.setenv("PRIVPIPE_WORKER_MAX_ANSWER_MB", "2")


def _release(kind: str, address: str, ledger_path: Path, inputs: dict[str, Path],
             policy_file: Path, out: Path, rid: str) -> None:
    runner = make_task_runner(f"privpipe+http://{address}")
    if kind == "curves":
        release_curves.with_options(task_runner=runner)(
            input_path=str(inputs["curves"]), domain="tracks", epsilon="0.5",
            ledger_path=str(ledger_path), policy_path=str(policy_file), chunk_users=3,
            release_id=rid, out_dir=str(out))
    else:
        release_streams.with_options(task_runner=runner)(
            input_path=str(inputs["streams"]), domain="meters", epsilon="1",
            ledger_path=str(ledger_path), policy_path=str(policy_file), chunk_users=2,
            release_id=rid, out_dir=str(out))


@pytest.mark.parametrize("kind", ["curves", "streams"])
@pytest.mark.parametrize("attack", list(ATTACKS))
def test_a_hostile_worker_fails_the_release_cleanly(attack, kind, client_env, curves_csv,
                                                    streams_csv, policy_file, ledger_path,
                                                    tmp_path):
    mark = str(tmp_path / "ran-in-pid-")
    bomb = pickle.dumps(_Bomb(mark))
    out = tmp_path / "out"
    inputs = {"curves": curves_csv, "streams": streams_csv}
    with hostile_worker(ATTACKS[attack], bomb) as address:
        with pytest.raises(RemoteResultMismatch) as exc:
            _release(kind, address, ledger_path, inputs, policy_file, out, "hostile")
    assert exc.value.exit_code == 4
    assert exc.value.worker == f"http://{address}"
    assert WHY[attack] in "; ".join(exc.value.problems)
    record = Ledger(ledger_path).release("hostile")
    assert record is not None and record["state"] == "failed"
    assert f"from worker http://{address}" in record["manifest"]["error"]
    assert not (out / "hostile").exists()
    assert not Path(mark + str(os.getpid())).exists(), "the worker's pickle ran code here"
    assert not list(tmp_path.glob("ran-in-pid-*"))


def test_the_pickle_attack_through_the_cli_exits_4(client_env, curves_csv, policy_file,
                                                   ledger_path, tmp_path):
    from typer.testing import CliRunner

    from flows.cli import app

    mark = str(tmp_path / "ran-in-pid-")
    out = tmp_path / "out"
    with hostile_worker(_pickle_everywhere, pickle.dumps(_Bomb(mark))) as address:
        r = CliRunner().invoke(app, [
            "release", "curves", str(curves_csv), "--domain", "tracks", "--epsilon", "0.5",
            "--policy", str(policy_file), "--ledger", str(ledger_path), "--out", str(out),
            "--chunk-users", "3", "--release-id", "cli", "--task-runner",
            f"privpipe+http://{address}"])
    assert r.exit_code == 4, r.output
    assert f"from worker http://{address}" in r.output and "Traceback" not in r.output
    assert Ledger(ledger_path).release("cli")["state"] == "failed"
    assert not (out / "cli").exists()
    assert not list(tmp_path.glob("ran-in-pid-*"))


def test_the_honest_answer_passes_through_the_test_server(client_env, curves_csv, policy_file,
                                                          ledger_path, tmp_path):
    """The attacks above fail because of what they change, not because of the test server."""
    with hostile_worker(lambda honest, mark: (200, honest), b"") as address:
        _release("curves", address, ledger_path, {"curves": curves_csv}, policy_file,
                 tmp_path / "out", "honest")
    assert Ledger(ledger_path).release("honest")["state"] == "settled"
    assert json.loads((tmp_path / "out" / "honest" / "manifest.json").read_text())


def test_the_canary_is_live(tmp_path):
    """The bomb does run code when unpickled (in a child process here): the canary can fire."""
    import subprocess

    mark = str(tmp_path / "ran-in-pid-")
    code = "import pickle, sys; pickle.loads(sys.stdin.buffer.read())"
    subprocess.run([sys.executable, "-c", code], input=pickle.dumps(_Bomb(mark)), check=True)
    assert len(list(tmp_path.glob("ran-in-pid-*"))) == 1


def test_a_dask_runner_on_the_cli_warns_that_its_workers_must_be_trusted(monkeypatch):
    import flows.cli_release as cli_release

    shown = []
    monkeypatch.setattr(cli_release, "print_error", lambda m, label="": shown.append((label, m)))
    monkeypatch.setattr(cli_release, "_prepare", lambda *a, **k: None)
    monkeypatch.setattr("flows.runners.make_task_runner", lambda spec: object())
    with pytest.raises(Exception):  # noqa: B017, PT011 - only the warning before it matters
        cli_release._run_release("no_such_flow", "tcp://10.0.0.1:8786", None, None)
    assert shown and shown[0][0] == "warning:" and "must be trusted" in shown[0][1]


def test_a_chunk_retried_after_a_failed_attempt_gives_the_threads_bytes(
        client_env, curves_csv, policy_file, tmp_path):
    """The worker fails each chunk's first attempt (HTTP 503); Prefect's retry re-sends it.

    The retry carries the same seeds, so the release is byte for byte the threads one:
    a retry never draws fresh noise.
    """
    import hashlib
    import shutil

    from schemas.policy import load_policy

    template = tmp_path / "template"
    template.mkdir()
    Ledger.init(template / "ledger.duckdb").apply_policy(load_policy(policy_file))
    for name in ("threads", "retried"):
        shutil.copytree(template, tmp_path / name)
    seen: set[bytes] = set()
    answers: dict[bytes, list[bytes]] = {}

    def flaky(honest: bytes, mark: bytes) -> Answer:
        key = honest[:64] + len(honest).to_bytes(8, "big")
        answers.setdefault(key, []).append(honest)
        if key not in seen:
            seen.add(key)
            return 503, b"busy"
        return 200, honest

    def digest(out: Path) -> dict[str, str]:
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in out.glob("*.parquet")}

    release_curves.with_options(task_runner=make_task_runner("threads"))(
        input_path=str(curves_csv), domain="tracks", epsilon="0.5",
        ledger_path=str(tmp_path / "threads" / "ledger.duckdb"), policy_path=str(policy_file),
        chunk_users=3, release_id="r", out_dir=str(tmp_path / "threads" / "out"))
    with hostile_worker(flaky, b"") as address:
        _release("curves", address, tmp_path / "retried" / "ledger.duckdb",
                 {"curves": curves_csv}, policy_file, tmp_path / "retried" / "out", "r")
    assert digest(tmp_path / "retried" / "out" / "r") == digest(tmp_path / "threads" / "out" / "r")
    assert len(answers) == 2 and all(len(a) == 2 and a[0] == a[1] for a in answers.values())


def test_a_worker_that_does_not_answer_in_time_fails_the_release_naming_it(
        client_env, curves_csv, policy_file, ledger_path, tmp_path, monkeypatch):
    """PRIVPIPE_WORKER_TIMEOUT: a silent worker is a timeout, retried, then exit 2 naming it."""
    import time

    from tasks.remote_chunk import WorkerUnavailableError

    monkeypatch.setenv("PRIVPIPE_WORKER_TIMEOUT", "0.5")
    out = tmp_path / "out"
    with hostile_worker(lambda honest, mark: (time.sleep(2), (200, honest))[1], b"") as address:
        with pytest.raises(WorkerUnavailableError, match="ReadTimeout") as exc:
            _release("curves", address, ledger_path, {"curves": curves_csv}, policy_file, out,
                     "silent")
    assert exc.value.exit_code == 2 and f"http://{address}" in str(exc.value)
    assert Ledger(ledger_path).release("silent")["state"] == "failed"
    assert not (out / "silent").exists()
