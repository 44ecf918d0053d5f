"""Where configs, offsets and statuses are kept: embedded SQLite, or Kafka topics."""
