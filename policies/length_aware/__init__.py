"""Length-aware continuous batching (`lacb`): the Magnus length predictor inside iteration-level
scheduling over a paged KV cache."""
