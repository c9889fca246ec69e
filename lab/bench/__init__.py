"""Benchmark suites (``python -m lab.bench SUITE``): multihome next to its peers on the same links.

Benchmarks, not tests: they report what was measured (with the revision and the machine) and
never fail on a number; see docs/EXPERIMENTS.md for the latest figures.
"""
