"""spark-gateway: one OpenAI-compatible URL in front of several engine instances, routing each request
to the instance that serves its workload profile best, from live measurements of the user's own traffic."""

__version__ = "0.1.0"
