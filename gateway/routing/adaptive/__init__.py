"""The adaptive objective scorer and its verdict: predictions in, one score per backend out."""
