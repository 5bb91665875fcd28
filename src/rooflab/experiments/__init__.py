"""Experiments: what to run and what to record; they return records, never touch the store."""
