"""Pure routing: features, filters, scorers, picker. Plain data in, a decision out; no I/O."""
