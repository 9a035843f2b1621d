"""Files a release writes and reads: safe creation, staging, release directories, Parquet.

`safe_files` (no symlink or planted file is followed, private modes),
`staging` / `staging_dir` / `staging_reaper` (the private per-run staging
directory of raw chunks and seeds, locked while in use, reaped after a
crash), `release_dir` (a release's published directory, checked against
the ledger's manifest), `outputs` (Parquet writers), `report_files` (report
pages and images). They never import `tasks`, `reports` or `flows`.
"""
