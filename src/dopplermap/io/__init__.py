"""Reading and writing files: problems, observations, configurations, results (one module per format)."""
