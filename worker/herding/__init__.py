"""The parts of the worker's :class:`~worker.herder.Herder`, one concern each.

- :mod:`~worker.herding.model`: the states, the errors the REST API maps to status codes, one herded connector;
- :mod:`~worker.herding.registry`: the connectors by name, the locks that guard them, their replication topologies;
- :mod:`~worker.herding.validation`: submitted configs checked (provider references resolved, nothing secret shown);
- :mod:`~worker.herding.bodies`: request bodies (configs, offsets) read with errors naming the JSON path;
- :mod:`~worker.herding.loop`: each connector's thread: apply changes, run epochs, wait;
- :mod:`~worker.herding.probes`: the lag of a STOPPED connector, measured by a source connector of its own;
- :mod:`~worker.herding.status`: status views, written to the status store and the metrics;
- :mod:`~worker.herding.offsets`: a stopped connector's offsets shown, altered and reset;
- :mod:`~worker.herding.control`: the control channel's answers to the task pairs (stop, offsets, wanted).

:class:`~worker.herder.Herder` wires them and is what the rest of the worker uses. Their log lines
go to the ``worker.herder`` logger, as before the split: operators' logger settings keep working.
"""
