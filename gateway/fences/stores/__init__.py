"""Fence store implementations (import the one you need; see `open_fence_store`)."""
