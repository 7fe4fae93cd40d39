"""Where the gateway keeps things: the database connections (SQLite, PostgreSQL), the store URLs
of fences, tasks, connectors and media, and files only the gateway's user may read."""
