"""Benchmarks: run from python/ as ``uv run python -m benchmarks.<name>``."""
