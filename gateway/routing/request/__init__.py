"""The request's features, computed once per request from its parsed body, without a tokenizer."""
