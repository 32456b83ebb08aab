"""Batches: the runner that moves each batch through its rounds (docs/batches.md)."""
