"""Edge middleware, one concept per module: Host/Origin, bearer auth, body limit, idle streams, the
uvicorn protocol with head limits, and the /metrics endpoint."""
