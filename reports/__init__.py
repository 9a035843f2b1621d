"""Report rendering: Markdown/HTML pages, plots and Prefect artifacts.

Tasks gather the data (from the ledger and the published files); the modules
here only render it: `release_sections` and `kind_sections` (a release's
report), `audit_report`, `evaluation_report`, `plots` / `plots_population`
(matplotlib, deterministic PNG bytes), `guarantee` (what a budget means in
the domain's units), `render` (Markdown to self-contained HTML, artifacts).
They never import `tasks` or `flows`.
"""
