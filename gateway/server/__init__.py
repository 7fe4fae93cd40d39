"""The process: the app and its runtime (`app.py`), `serve` and `--workers`, drain on SIGTERM,
and the operations endpoints (/healthz, /readyz, /metrics)."""
