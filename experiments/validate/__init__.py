"""The simulator against the real engine (`python -m experiments.validate`): live replays on a GPU,
or replays recorded earlier, compared step by step."""
