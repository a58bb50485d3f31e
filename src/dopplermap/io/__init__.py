"""Reading and writing files: observations, configurations, results."""
