"""Chunk tasks that run on a privpipe worker (`privpipe worker serve`) over HTTPS.

The task runs in a thread of the flow process: it encodes its chunk as a
wire-format request (`tasks.wire_chunk`), posts it to one of the runner's
workers, and reads the answer with json and pyarrow only
(`tasks.wire_result.decode_result`): nothing the worker sends is unpickled,
so a hostile worker cannot run code in the flow process, which holds the
ledger and its noise key. An answer that is not a well-formed result for the
chunk sent (schema, row counts, ids, output times, non-finite numbers, size)
fails the chunk with `RemoteAnswerError` naming the worker; the values and
costs of a well-formed answer are then checked by the flow's local
re-execution of a secret sample (`tasks.recheck`) and by the costs recomputed
from the outputs (`ledger.recompute`).

Retries: a worker that cannot be reached (connection refused, timeout, an
HTTP 5xx) is skipped for the next one; a task whose workers all failed is
retried by Prefect (same chunk, same seeds, so the same bytes: a retry never
draws fresh noise). A malformed answer is never retried.

Client settings (environment variables): ``PRIVPIPE_WORKER_TOKEN_FILE`` (the
bearer token the workers expect), ``PRIVPIPE_WORKER_CA`` (the CA file that
signed the workers' certificates; default: the system's CAs),
``PRIVPIPE_WORKER_CERT`` / ``PRIVPIPE_WORKER_KEY`` (a client certificate, for
workers started with ``--client-ca``), ``PRIVPIPE_WORKER_TIMEOUT`` (seconds
per chunk, default 600) and ``PRIVPIPE_WORKER_MAX_ANSWER_MB`` (largest
answer read, default 2048).
"""

from __future__ import annotations

import json
import os
import ssl
import threading
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from ledger.keys import read_token_file
from schemas.errors import EXIT_BAD_INPUT, ParameterError
from tasks.privatize import ChunkResult, CurveSpec, MechanismRunError, StreamSpec
from tasks.recheck import RemoteResultMismatch
from tasks.stage import CurveChunk, StreamChunk
from tasks.wire_chunk import encode_curve_request, encode_stream_request
from tasks.wire_result import decode_result

__all__ = ["RemoteAnswerError", "WorkerPool", "WorkerUnavailableError", "remote_curves",
           "remote_streams"]

CONTENT_TYPE = "application/vnd.privpipe.wire.v1"
CHUNK_PATH = "/v1/chunk"


class RemoteAnswerError(RemoteResultMismatch):
    """A worker's answer is not a well-formed result for the chunk sent (exit 4, integrity)."""

    def __init__(self, worker: str, chunk: int, problems: list[str]) -> None:
        super().__init__(worker, chunk, problems)
        self.args = (f"the result of chunk {chunk} from worker {worker} is refused "
                     f"({'; '.join(problems[:3])}): the worker is not trusted, nothing is "
                     "published and the release is recorded as failed; rerun it with the same "
                     "release id on trusted workers, or close it with `privpipe ledger close`",)


class WorkerUnavailableError(MechanismRunError):
    """No worker of the runner took a chunk (down, refused, timed out); exit 2, retryable.

    The release is recorded as failed and nothing is published; rerun it with
    the same release id once the workers are up (the same seeds draw the same
    noise), or close it with `privpipe ledger close`.
    """

    exit_code = EXIT_BAD_INPUT

    def __init__(self, chunk: int, reasons: dict[str, str]) -> None:
        shown = "; ".join(f"{w}: {r}" for w, r in reasons.items())
        Exception.__init__(self, f"no privpipe worker took chunk {chunk} ({shown}); nothing "
                                 "is published and the release is recorded as failed: start "
                                 "the workers (`privpipe worker serve`) and rerun it with the "
                                 "same release id, or close it with `privpipe ledger close`")
        self.worker = ", ".join(reasons)
        self.user_id, self.item_id = f"chunk {chunk}", f"chunk {chunk}"


def _env_path(name: str) -> str | None:
    value = os.environ.get(name) or None
    if value is not None and not Path(value).is_file():
        raise ParameterError(f"{name}={value!r}: no such file")
    return value


def _env_number(name: str, default: float) -> float:
    text = os.environ.get(name) or ""
    try:
        value = float(text) if text else default
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ParameterError(f"{name} must be a positive number; got {text!r}")
    return value


class WorkerPool:
    """The workers of a ``privpipe+https://`` runner and the HTTP client the task threads share.

    Chunk i goes to worker ``i mod n`` first, then to the next ones if that
    one cannot be reached. `served` records which worker answered each task
    run (what `flows.runners.worker_of` names).
    """

    def __init__(self, urls: list[str]) -> None:
        import httpx

        token_file = _env_path("PRIVPIPE_WORKER_TOKEN_FILE")
        self.urls = list(urls)
        self._headers = {"content-type": CONTENT_TYPE, "accept-encoding": "identity"}
        if token_file:
            token = read_token_file(token_file, "PRIVPIPE_WORKER_TOKEN_FILE")
            self._headers["authorization"] = f"Bearer {token}"
        self.max_answer = int(_env_number("PRIVPIPE_WORKER_MAX_ANSWER_MB", 2048) * 2**20)
        ctx = ssl.create_default_context(cafile=_env_path("PRIVPIPE_WORKER_CA"))
        cert, key = _env_path("PRIVPIPE_WORKER_CERT"), _env_path("PRIVPIPE_WORKER_KEY")
        if cert:
            ctx.load_cert_chain(cert, key)
        self._make = lambda: httpx.Client(
            verify=ctx, timeout=_env_number("PRIVPIPE_WORKER_TIMEOUT", 600.0))
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()
        self.served: dict[str, str] = {}

    def __repr__(self) -> str:
        return f"<WorkerPool {', '.join(self.urls)}>"

    def close(self) -> None:
        """Close the HTTP client's connections (a later `send` opens new ones)."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def _http(self) -> Any:
        with self._lock:
            if self._client is None:
                self._client = self._make()
            return self._client

    def send(self, index: int, body: bytes) -> tuple[str, int, bytes]:
        """Post a request to the chunk's workers in turn; (worker, HTTP status, answer).

        Raises:
            WorkerUnavailableError: naming each worker tried and why it failed.
            RemoteAnswerError: a worker's answer is over the size limit.
        """
        import httpx

        reasons: dict[str, str] = {}
        n = len(self.urls)
        for k in range(n):
            url = self.urls[(index + k) % n]
            try:
                status, answer = self._post(url, body)
            except httpx.HTTPError as err:
                reasons[url] = f"{type(err).__name__}: {err}"[:300]
                continue
            if answer is None:
                raise RemoteAnswerError(url, index, [
                    f"an answer over {self.max_answer} bytes (PRIVPIPE_WORKER_MAX_ANSWER_MB)"])
            if status not in (200, 422):  # down, refusing us, or not a privpipe worker
                reasons[url] = f"HTTP {status} ({answer[:200].decode('utf-8', 'replace')})"
                continue
            return url, status, answer
        raise WorkerUnavailableError(index, reasons)

    def _post(self, url: str, body: bytes) -> tuple[int, bytes | None]:
        """One POST: (status, answer), the answer None when it is over `max_answer` bytes.

        The answer is read as sent (a content encoding is not decoded, so a
        compressed answer is refused as not an envelope), in pieces, and dropped
        once it is over the limit.
        """
        with self._http().stream("POST", url + CHUNK_PATH, content=body,
                                 headers=self._headers) as resp:
            declared = resp.headers.get("content-length")
            if declared is not None and declared.isdigit() and int(declared) > self.max_answer:
                return resp.status_code, None
            got, size = [], 0
            for piece in resp.iter_raw():  # never decoded: no gzip bomb
                size += len(piece)
                if size > self.max_answer:
                    return resp.status_code, None
                got.append(piece)
            return resp.status_code, b"".join(got)

    def record(self, worker: str) -> None:
        """Note that the current task run's chunk was answered by `worker`."""
        from prefect.context import TaskRunContext

        ctx = TaskRunContext.get()
        if ctx is not None:
            with self._lock:
                self.served[str(ctx.task_run.id)] = worker


def _mechanism_error(worker: str, index: int, answer: bytes, users: tuple[str, ...]
                     ) -> MechanismRunError:
    """A worker's report that the mechanism failed on one user (HTTP 422), as the local error."""
    try:
        info = json.loads(answer.decode("utf-8"))
        user, item, cause = str(info["user_id"]), str(info["item_id"]), str(info["cause"])
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return RemoteAnswerError(worker, index, ["a malformed error answer"])
    if user not in users:
        user = f"chunk {index}"
    return MechanismRunError(user, item[:200], RuntimeError(f"{cause[:80]} on worker {worker}"))


def _answer(pool: WorkerPool, body: bytes, chunk: CurveChunk | StreamChunk, spec: Any,
            value_columns: tuple[str, ...]) -> ChunkResult:
    worker, status, answer = pool.send(chunk.index, body)
    pool.record(worker)
    if status == 422:
        raise _mechanism_error(worker, chunk.index, answer, tuple(chunk.user_ids))
    try:
        return decode_result(answer, chunk, spec, value_columns)
    except Exception as err:  # noqa: BLE001 - any malformed answer fails the chunk, named
        raise RemoteAnswerError(worker, chunk.index, [f"a malformed answer: {err}"[:300]]
                                ) from None


def privatize_curve_chunk_remote(chunk: CurveChunk, value_columns: tuple[str, ...],
                                 spec: CurveSpec, pool: WorkerPool) -> ChunkResult:
    """`tasks.privatize.privatize_curve_chunk` run by a privpipe worker (see the module)."""
    body = encode_curve_request(chunk, value_columns, spec)
    return _answer(pool, body, chunk, spec, value_columns)


def privatize_stream_chunk_remote(chunk: StreamChunk, spec: StreamSpec,
                                  pool: WorkerPool) -> ChunkResult:
    """`tasks.privatize.privatize_stream_chunk` run by a privpipe worker (see the module)."""
    return _answer(pool, encode_stream_request(chunk, spec), chunk, spec, ())


def _retry_unavailable(task: Any, task_run: Any, state: Any) -> bool:
    """Retry only a chunk no worker took (a malformed answer is not retried)."""
    try:
        state.result()
    except WorkerUnavailableError:
        return True
    except BaseException:  # noqa: BLE001 - any other failure is final
        return False
    return False


remote_curves = task(privatize_curve_chunk_remote, name="privatize-curves-remote", retries=2,
                     retry_delay_seconds=1, persist_result=False, cache_policy=NO_CACHE,
                     retry_condition_fn=_retry_unavailable)
remote_streams = task(privatize_stream_chunk_remote, name="privatize-streams-remote",
                      retries=2, retry_delay_seconds=1, persist_result=False,
                      cache_policy=NO_CACHE, retry_condition_fn=_retry_unavailable)
