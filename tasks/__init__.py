"""Prefect tasks and the planning they call.

Each task adapts: it loads (ledger, staged files), calls the pure core
(`mechanisms`), and returns plain data; rendering lives in `reports`, file
handling in `files`.
"""
