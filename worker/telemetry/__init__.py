"""What the worker reports: Prometheus metrics, progress lines, lag."""
