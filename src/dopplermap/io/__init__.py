"""Readers and writers of observations, results and configuration (one module per format family)."""
