"""Pure routing: plain data in, a decision out; no I/O. Its parts, each a subpackage:

- pipeline/: the decision for one request: features -> profile -> filters -> scorers -> picker, spill,
  and its explanation (pipeline/router.py is the entry point).
- request/: the request's features, estimated cheaply from its body.
- model/: the performance model: fits of TTFT and TPOT against load per (backend, profile) cell, the
  prediction of one request on a backend, and what it costs its device's other requests.
- slowdown/: how much slower than its fits an engine runs now, read from finished and in-flight requests,
  and the memory of it the producer side writes.
- explore/: what a decision measures besides what it predicts, and how often.
- adaptive/: the objective scorer that joins them into one score per backend.
"""
