"""Calls held at the gateway for a person's decision (docs/approvals.md): the records, their
durable store in the gateway's database, the service that opens, decides and waits for them, the
admin API (/admin/approvals) and `dex-gateway approvals list|decide`."""
