"""Benchmarks of docs/benchmarks.md, run as scripts: ``python bench/<name>.py``."""
