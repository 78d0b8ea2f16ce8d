"""The benchmark suite behind ``python tools/benchmarks.py`` (one module per section)."""
