"""Reproductions of the followed papers' tables: Magnus (Table I, predictor accuracy, the CCB
breakdown) and RTP-LLM's measurements."""
