"""Apache brokers run from their Maven Central jars: pinned artifacts (:mod:`worker.brokers.maven`)
and each broker's configuration (:mod:`worker.brokers.kafka`). The processes themselves are
started by :mod:`worker.embedded`."""
