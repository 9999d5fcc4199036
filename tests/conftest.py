"""Shared fixtures. Servers in tests listen on 127.0.0.1 only."""
