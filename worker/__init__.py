"""The runtime: Spark driver loop, stores, CLI."""
