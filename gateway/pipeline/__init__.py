"""The one tools/call tail (`calls.py`) and what it uses: the catalog of routes, rate limits, size
limits, per-call telemetry; and passthrough of resources, prompts and completion."""
