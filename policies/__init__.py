"""Scheduling policies, registered by name (see `policies.registry`)."""
