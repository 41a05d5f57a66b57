"""Benchmarks: each script prints one JSON object as its last line (see its docstring)."""
