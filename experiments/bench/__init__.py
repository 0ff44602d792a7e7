"""`vllm bench serve` in and out: bench.json written as vLLM writes it, its flags as config
overrides, benchmarks replayed and used to calibrate the engine terms."""
