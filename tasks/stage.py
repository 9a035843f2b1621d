"""Ingest task: validate the input once and stage it in chunks of users."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from prefect import task

import ingest
from ingest import Rejection, UserCurves, UserStreams, input_fingerprint
from schemas.policy import Domain
from tasks.staging import StagedChunk, stage_curve_chunk, stage_stream_chunk


@dataclass
class StagePlan:
    """The staged input: chunk files, what each user asks for, rejections, fingerprint.

    `steps` maps user_id -> list of (step, stream_id, steps-array-or-None); it is
    what the plan turns into ledger requests. Nothing here is a raw value.
    """

    fingerprint: str
    chunks: list[StagedChunk]
    steps: dict[str, list[tuple[str, str]]]
    stream_steps: dict[tuple[str, str], list[tuple[int, int]]] = field(default_factory=dict)
    rejected: list[dict[str, Any]] = field(default_factory=list)
    users: int = 0
    items: int = 0
    points: int = 0


def contiguous_ranges(steps: Any) -> list[tuple[int, int]]:
    """Half-open ranges [a, b) of consecutive integers covering sorted `steps`."""
    arr = np.asarray(steps, dtype=np.int64)
    if arr.size == 0:
        return []
    breaks = np.flatnonzero(np.diff(arr) != 1) + 1
    starts = np.concatenate([[0], breaks])
    stops = np.concatenate([breaks, [arr.size]])
    return [(int(arr[a]), int(arr[b - 1]) + 1) for a, b in zip(starts, stops, strict=True)]


def _flush(kind: str, buf: list, index: int, staging: Path, domain: Domain) -> StagedChunk:
    path = staging / f"chunk-{index:05d}.arrow"
    if kind == "curves":
        stage_curve_chunk(buf, path, domain.value_columns)
    else:
        stage_stream_chunk(buf, path)
    return StagedChunk(index=index, path=str(path), user_ids=tuple(u.user_id for u in buf))


def stage_input_fn(source: str, domain: Domain, staging: str, *, chunk_users: int = 200,
                   table: str | None = None) -> StagePlan:
    """Validate `source` for `domain` (one streaming pass) and stage chunks of users.

    Rejected users are listed with every reason (rule, row, column; never values)
    and get no request, so nothing is charged for them.
    """
    staging_dir = Path(staging)
    staging_dir.mkdir(parents=True, exist_ok=True)
    fingerprints: dict[str, str] = {}
    chunks: list[StagedChunk] = []
    steps: dict[str, list[tuple[str, str]]] = {}
    stream_steps: dict[tuple[str, str], list[tuple[int, int]]] = {}
    rejected: list[dict[str, Any]] = []
    buf: list[UserCurves | UserStreams] = []
    n_items = n_points = 0
    for item in ingest.iter_users(source, domain, table=table):
        if isinstance(item, Rejection):
            rejected.append({
                "user_id": item.user_id,
                "reasons": [p.describe(show_values=False) for p in item.problems],
                "rules": sorted({p.rule for p in item.problems}),
            })
            continue
        fingerprints[item.user_id] = item.fingerprint
        if isinstance(item, UserCurves):
            steps[item.user_id] = [(f"curve:{c.curve_id}", "") for c in item.curves]
            n_items += len(item.curves)
            n_points += sum(len(c.t) for c in item.curves)
        else:
            steps[item.user_id] = [(f"stream:{s.stream_id}", s.stream_id) for s in item.streams]
            for s in item.streams:
                stream_steps[(item.user_id, s.stream_id)] = contiguous_ranges(s.steps)
            n_items += len(item.streams)
            n_points += sum(len(s.steps) for s in item.streams)
        buf.append(item)
        if len(buf) >= chunk_users:
            chunks.append(_flush(domain.kind, buf, len(chunks), staging_dir, domain))
            buf = []
    if buf:
        chunks.append(_flush(domain.kind, buf, len(chunks), staging_dir, domain))
    # The input's one fingerprint, as `privpipe validate` prints it (ingest/fingerprint.py).
    fingerprint = input_fingerprint(fingerprints, (r["user_id"] for r in rejected))
    return StagePlan(fingerprint=fingerprint, chunks=chunks, steps=steps,
                     stream_steps=stream_steps, rejected=rejected, users=len(steps),
                     items=n_items, points=n_points)


stage_input = task(stage_input_fn, name="ingest-and-stage", persist_result=False)
