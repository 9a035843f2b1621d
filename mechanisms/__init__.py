"""The pure numeric core of privpipe: numpy and scipy only.

Sub-packages: `curves` (geo-privacy for functions), `streams` (Square Wave and
baselines under w-event LDP), `reconstruct` (CPR), `metrics`. Cost types live
in `mechanisms.cost`. Nothing here imports Prefect, DuckDB, pandera or
matplotlib, and nothing reads or writes files.
"""
