"""What a `privpipe.Session` gives back: a published release as tables, a dry run's forecast."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from files.release_dir import check_published
from schemas.errors import ParameterError

if TYPE_CHECKING:
    import pandas as pd

_WARNING = "> **Warning"


@dataclass(frozen=True)
class Release:
    """A published release: its id, manifest and report, and its outputs as tables.

    The tables are read when the release is returned, after its directory is
    checked byte for byte against the manifest the ledger holds, so they stay
    usable after the session (and a temporary work directory) is closed.

    Attributes:
        release_id: the ledger's id of the release (a rerun with the same data and
            parameters is the same release and charges nothing more).
        manifest: the release's manifest (counts, files, parameters, fingerprints).
        directory: the published release directory.
        report: its HTML report.
        warnings: the report's warnings, as its reader sees them (a guarantee that
            hides almost nothing at the data's scale, a poor reconstruction, CPR
            finding no period), in the report's order.
    """

    release_id: str
    manifest: dict[str, Any]
    directory: Path
    report: Path
    warnings: tuple[str, ...]
    tables: Mapping[str, pa.Table] = field(repr=False)

    @property
    def counts(self) -> dict[str, Any]:
        """Users released and denied, items, rows per output (the manifest's counts)."""
        return dict(self.manifest["counts"])

    @property
    def names(self) -> tuple[str, ...]:
        """The published tables, e.g. ``values``, ``segments``, ``curves`` or ``samples``."""
        return tuple(self.tables)

    def arrow(self, name: str) -> pa.Table:
        """The published table `name` as a pyarrow Table.

        Raises:
            ParameterError: the release published no table of that name (names them).
        """
        if name not in self.tables:
            raise ParameterError(f"release {self.release_id} published no table {name!r}; "
                                 f"it has: {', '.join(self.tables) or 'none'}")
        return self.tables[name]

    def __getitem__(self, name: str) -> pd.DataFrame:
        """The published table `name` as a pandas DataFrame (`arrow` converted)."""
        return self.arrow(name).to_pandas()


@dataclass(frozen=True)
class DryRun:
    """What a release would do now: who is admitted or denied, at what cost; nothing charged.

    Attributes:
        release_id: the id the release would have.
        input_fingerprint: the validated input's fingerprint.
        counts: users that would be released, denied and (where public) rejected.
        users: one row per user: ``decision``, ``requested``, ``remaining_after``,
            ``units``, ``reason`` (`flows.dry_run.PLAN_COLUMNS`).
    """

    release_id: str
    input_fingerprint: str
    counts: dict[str, Any]
    users: pd.DataFrame


def published(result: dict[str, Any]) -> Release:
    """The `Release` of a release flow's result, its directory checked against its manifest."""
    directory, manifest = Path(result["out"]), result["manifest"]
    check_published(directory, manifest)
    tables = {name: pq.read_table(directory / rel)
              for name, rel in sorted((manifest.get("files") or {}).items())
              if rel.endswith(".parquet")}
    report_md = directory / "report.md"
    lines = report_md.read_text(encoding="utf-8").splitlines() if report_md.exists() else []
    warnings = tuple(line[2:].replace("**", "") for line in lines if line.startswith(_WARNING))
    return Release(release_id=result["release_id"], manifest=manifest, directory=directory,
                   report=Path(result["report"]), warnings=warnings, tables=tables)


def forecast(result: dict[str, Any]) -> DryRun:
    """The `DryRun` of a dry run's result (`flows.dry_run.dry_run_result`)."""
    import pandas as pd

    from flows.dry_run import PLAN_COLUMNS

    return DryRun(release_id=result["release_id"],
                  input_fingerprint=result["input_fingerprint"], counts=dict(result["counts"]),
                  users=pd.DataFrame(result["users"], columns=list(PLAN_COLUMNS)))
