"""connect.clientpool.ClientPool, the one pool every connector uses: exclusive (Kafka clients) and
shared (Pulsar, RocketMQ) clients, bounded idle ones, closing at release or exit."""

from connect.clientpool import ClientPool
from connectors.kafka.clients import KafkaClients, client_config


class _Client:
    made = 0

    def __init__(self, key=None):
        _Client.made += 1
        self.key = key
        self.closed = 0

    def close(self):
        self.closed += 1


def test_acquire_reuses_a_released_client_with_the_same_settings():
    pool = KafkaClients(max_idle_per_role=2)
    conf = {"bootstrap.servers": "127.0.0.1:1"}
    client = pool.acquire("admin", "t0", conf)
    pool.release("admin", "t0", conf, client)
    assert pool.acquire("admin", "t0", conf) is client
    assert pool.acquire("admin", "t0", conf) is not client  # taken: a new one


def test_idle_clients_are_bounded_per_role_oldest_first():
    pool = KafkaClients(max_idle_per_role=2)
    conf = {"bootstrap.servers": "127.0.0.1:1"}
    clients = [pool.acquire("admin", f"t{i}", conf) for i in range(4)]
    for i, c in enumerate(clients):
        pool.release("admin", f"t{i}", conf, c)
    assert pool.acquire("admin", "t3", conf) is clients[3]
    assert pool.acquire("admin", "t2", conf) is clients[2]
    assert pool.acquire("admin", "t0", conf) is not clients[0]  # evicted and closed
    pool.close_all()


def test_a_shared_pool_hands_one_client_to_every_user_and_closes_it_after_the_last():
    pool = ClientPool(_Client, shared=True)
    a, b = pool.acquire(("cluster", 1)), pool.acquire(("cluster", 1))
    other = pool.acquire(("cluster", 2))
    assert a is b and a is not other and a.key == ("cluster", 1)
    pool.release(("cluster", 1))
    assert a.closed == 0  # still used
    pool.release(("cluster", 1))
    assert a.closed == 1
    assert pool.acquire(("cluster", 1)) is not a
    pool.close_all()
    assert other.closed == 1


def test_an_exclusive_pool_closes_a_released_client_beyond_max_idle():
    pool = ClientPool(_Client, max_idle=1)
    first, second = pool.acquire("k"), pool.acquire("k")
    pool.release("k", first)
    pool.release("k", second)
    assert first.closed == 1 and second.closed == 0  # the least recently released goes
    assert pool.acquire("k") is second
    pool.release("k", second)
    pool.close_all()
    assert second.closed == 1
    none_idle = ClientPool(_Client)
    client = none_idle.acquire("k")
    none_idle.release("k", client)
    assert client.closed == 1 and none_idle.acquire("k") is not client


def test_client_config_layers_overrides_by_role():
    config = {"bootstrap.servers": "h:1", "client.override.client.id": "all", "producer.override.linger.ms": "50",
              "consumer.override.fetch.min.bytes": "9"}
    conf = client_config(config, "producer", {"acks": "all"})
    assert conf.pop("logger").name == "connectors.kafka.producer"
    assert conf == {"acks": "all", "bootstrap.servers": "h:1", "client.id": "all", "linger.ms": "50"}
