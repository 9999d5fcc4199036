"""An engine's slow-down against its own fits: the pure reading, and the memory the producer side writes."""
