"""Batches, the pure part: an item's turns replayed from the answers its rounds brought."""
