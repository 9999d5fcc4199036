"""Exploration: which under-measured backend a decision measures, and the pacing that bounds it."""
