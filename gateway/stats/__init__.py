"""Measurements: live windows per backend x profile, and Prometheus metrics."""
