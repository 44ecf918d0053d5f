"""The HTTP API: the REST API (Kafka Connect's paths), its guard (auth, limits, allowed hosts),
its CLI client (``connect connectors``) and the findable address (``<data.dir>/rest.json``)."""
