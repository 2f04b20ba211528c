"""Benchmark harness (issue 7): seeded workload, one script per measurement, results in README."""
