"""RocketMQ: the remoting protocol spoken by this project's own client and embedded broker (no
Python library speaks it with explicit offsets and pipelining), and the source and sink built on it."""
