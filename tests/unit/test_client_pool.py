"""The per-process Kafka client pool reuses clients and bounds how many idle ones it keeps."""

from connectors.kafka.clients import ClientPool, client_config


def test_acquire_reuses_a_released_client_with_the_same_settings():
    pool = ClientPool(max_idle_per_role=2)
    conf = {"bootstrap.servers": "127.0.0.1:1"}
    client = pool.acquire("admin", "t0", conf)
    pool.release("admin", "t0", conf, client)
    assert pool.acquire("admin", "t0", conf) is client
    assert pool.acquire("admin", "t0", conf) is not client  # taken: a new one


def test_idle_clients_are_bounded_per_role_oldest_first():
    pool = ClientPool(max_idle_per_role=2)
    conf = {"bootstrap.servers": "127.0.0.1:1"}
    clients = [pool.acquire("admin", f"t{i}", conf) for i in range(4)]
    for i, c in enumerate(clients):
        pool.release("admin", f"t{i}", conf, c)
    assert pool.idle_count("admin") == 2
    assert pool.acquire("admin", "t3", conf) is clients[3]
    assert pool.acquire("admin", "t0", conf) is not clients[0]  # evicted and closed
    pool.close_all()


def test_client_config_layers_overrides_by_role():
    config = {"bootstrap.servers": "h:1", "client.override.client.id": "all", "producer.override.linger.ms": "50",
              "consumer.override.fetch.min.bytes": "9"}
    conf = client_config(config, "producer", {"acks": "all"})
    assert conf.pop("logger").name == "connectors.kafka.producer"
    assert conf == {"acks": "all", "bootstrap.servers": "h:1", "client.id": "all", "linger.ms": "50"}
