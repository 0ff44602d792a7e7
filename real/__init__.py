"""The real torch backend: a Llama-family engine behind the simulator's `Executor` interface.

Importing `real` does not import torch; `real.executor.TorchExecutor` (and the modules it uses) do.
`real.spec` and `real.options` stay torch-free so configs can be checked without torch.
"""
