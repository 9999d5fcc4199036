"""The performance model: per (backend, profile) cell, TTFT and TPOT against load, and a request's predicted
outcome on a backend with the harm it does its device's other requests."""
