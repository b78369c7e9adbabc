"""Benchmarks and fault harnesses that drive toren with real processes (not part of the library)."""
