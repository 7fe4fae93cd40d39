"""The host's HTTP API (approvals, questions, steer, cancel, the live stream) and its web page (`web/`)."""
