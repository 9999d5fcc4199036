"""The decision pipeline for one request: filters, scorers, picker, spill, and its explanation."""
