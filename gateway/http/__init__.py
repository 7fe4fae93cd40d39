"""Edge middleware, one concept per module: Host/Origin, bearer auth, body limit, idle streams, the
uvicorn protocol with head limits and its staged close, and the /metrics endpoint."""
