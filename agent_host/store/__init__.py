"""The session store: one SQLite file per host (`session_store.SessionStore` is the entry point)."""
