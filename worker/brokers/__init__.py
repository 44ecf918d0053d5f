"""Apache brokers run from their Maven Central jars: pinned artifacts (:mod:`worker.brokers.maven`),
each broker's configuration (:mod:`worker.brokers.kafka`, :mod:`worker.brokers.rocketmq`) and the
one-JVM RocketMQ launcher (:mod:`worker.brokers.rocketmq_launcher`). The processes themselves are
started by :mod:`worker.embedded`."""
