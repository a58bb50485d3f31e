"""Readers and writers of problem, observation and result files (one module per format)."""
