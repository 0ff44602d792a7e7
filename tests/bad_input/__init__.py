"""Bad input: every case names the field and value in its error, or records a reason (issue 13)."""
