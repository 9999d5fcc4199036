"""The policy YAML: schema, loading with line-numbered errors, hot reload, classification."""
