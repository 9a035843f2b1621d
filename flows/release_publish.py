"""The last stage of a release: its files, manifest, report, ledger record and publication.

The release's Parquet files are finished from the appender (in the kind's
order), the per-user-unit outputs written beside them, the manifest assembled
(common entries, then the kind's), the report rendered, the manifest sealed
with every file's SHA-256, the release recorded as settled in the ledger, and
only then the release directory published (`files.release_dir.ReleaseBuild`);
a stream release's samples are then kept in the ledger's store too
(`keep_published`).
Nothing here draws noise or charges budget: it writes what the settled chunks
and the post-processing produced.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from files.outputs import ParquetAppender
from files.release_dir import ReleaseBuild
from flows import faults, signals
from flows.outcome import rejection_counts
from flows.release_kinds import PostProcessed
from flows.release_stages import Admission, ChunkOutputs, ReleaseRun, result
from tasks.report import write_release_report
from tasks.stream_history import keep_in_ledger
from tasks.user_units import write_user_unit_outputs


def publish(run: ReleaseRun, appender: ParquetAppender, admission: Admission,
            post: PostProcessed, outputs: ChunkOutputs) -> dict[str, Any]:
    """Write, describe, record and publish the release; returns the flow's result."""
    build = ReleaseBuild(run.staging, run.out_root, run.rid)  # private until published
    rdir = build.path
    files, counts = _finish_tables(appender, rdir, run.kind.output_names(post))
    files.update(write_user_unit_outputs(rdir, run.dom, files, run.parameters, appender))
    faults.fault_point("after_outputs")
    manifest = _manifest(run, admission, post, outputs, files, counts)
    manifest.update(run.kind.manifest_extras(run, rdir, files, post, len(admission.admitted)))
    write_release_report(str(rdir), manifest, admission.denied, run.plan.rejected,
                         run.ledger_path, publish_dir=str(build.target))
    faults.fault_point("after_report")
    manifest = build.seal(manifest)  # manifest.json with the SHA-256 of every file
    faults.fault_point("after_manifest")
    run.ledger.record_release(run.rid, manifest, "settled")
    faults.fault_point("before_publish")
    rdir = build.publish(manifest)
    keep_published(run, rdir, manifest)
    return result(run.rid, rdir, manifest)


def keep_published(run: ReleaseRun, rdir: Path, manifest: dict[str, Any]) -> None:
    """Keep a published stream release's samples in the ledger's store (a warning if not).

    After publication, so a failure here neither unpublishes nor charges
    anything; a rerun of the release keeps them (`tasks.stream_history.keep_in_ledger`).
    """
    problem = keep_in_ledger(run.ledger, run.rid, rdir, manifest)
    if problem is not None:
        signals.run_logger().warning(problem)


def _finish_tables(appender: ParquetAppender, rdir: Path, names: tuple[str, ...]
                   ) -> tuple[dict[str, str], dict[str, int]]:
    """Finish each appended table as `rdir/<name>.parquet`: the files and their row counts."""
    files: dict[str, str] = {}
    counts: dict[str, int] = {}
    for name in names:
        if name not in appender:
            continue
        counts[f"{name}_rows"] = appender.finish(name, rdir / f"{name}.parquet")
        files[name] = f"{name}.parquet"
        faults.fault_point("between_merges")
    return files, counts


def _manifest(run: ReleaseRun, admission: Admission, post: PostProcessed,
              outputs: ChunkOutputs, files: dict[str, str], counts: dict[str, int]
              ) -> dict[str, Any]:
    """The manifest's common entries, in their published order."""
    plan, dom, kind = run.plan, run.dom, run.kind
    first_seq, last_seq = run.ledger.entry_range(run.rid) or (None, None)
    return {
        **run.base_manifest,
        "mechanism": kind.spec.mechanism,
        "counts": {**rejection_counts(dom.rejections_public, plan.users, len(plan.rejected)),
                   "users_released": len(admission.admitted),
                   "users_denied": len(admission.denied),
                   **kind.unchanged_count(admission.unchanged),
                   "items": plan.items,
                   # the total point count is an aggregate of private counts unless
                   # the domain declares point counts public
                   **({"points": plan.points} if kind.points_public(dom) else {}), **counts},
        "files": files,
        "ledger_entries": {"first_seq": first_seq, "last_seq": last_seq},
        "ledger_head": run.ledger.head().to_dict(),  # kept by auditors: `ledger verify`
        "error_bound": {"beta": kind.beta,
                        "max": outputs.bounds.top, "mean": outputs.bounds.mean,
                        "rms_mean": outputs.rms.mean, "rms_max": outputs.rms.top},
        "periods": post.periods,
        "public_metadata": {
            "fields": list(dom.public_fields()),
            "note": "released as-is, outside the noise, as the domain's policy declares; "
                    "users rejected by validation or denied by the ledger are absent"},
    }
