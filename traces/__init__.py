"""Request arrival traces: one schema, loaders for public formats, synthetic generators."""
