"""The Dex agent host: a thin, durable agent loop whose only tool source is the gateway."""
