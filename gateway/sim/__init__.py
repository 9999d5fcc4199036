"""The engine twin: simulated DGX Spark engines with the HTTP surfaces of vLLM, SGLang and llama.cpp."""
