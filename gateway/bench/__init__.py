"""Benchmarks behind `spark-gateway bench` (one module a kind, each with `register(subparsers)`)."""
