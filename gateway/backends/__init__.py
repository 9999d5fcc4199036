"""Backend state: registry, readiness prober, engine flavor adapters."""
