"""Task-pair runner: what one Spark partition executes."""
