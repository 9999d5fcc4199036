"""Upstream calls: the transport seam, SSE pass-through, dispatch with failover and cancel."""
