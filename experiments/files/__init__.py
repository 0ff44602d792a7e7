"""The results folder: resolved and written atomically (never through a planted link), one sweep at
a time (a lock), honest resume of finished runs, and host-timing files kept apart from results."""
