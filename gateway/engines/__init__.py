"""Engines on demand: engine containers found by their labels or declared in the config, started when a
request needs one, stopped when idle, kept within each device's memory budget (docs/engines.md)."""
