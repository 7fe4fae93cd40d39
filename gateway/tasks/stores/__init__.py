"""Task store implementations (import the one you need; see `open_task_store`)."""
