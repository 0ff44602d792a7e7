"""What a sweep shows: its result files and console tables, the standard figures, steady-state and
per-class reports."""
