"""The durable host service (`dex-agent serve`): leases, the driver that picks up due work, serve."""
