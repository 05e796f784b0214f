"""The apache/kafka settings of the testcontainers fallback (used only where Docker runs)."""

from services import APACHE_KAFKA_IMAGE, apache_kafka_env


def test_the_broker_advertises_the_port_the_tests_connect_to() -> None:
    env = apache_kafka_env("127.0.0.1", 40123)
    assert env["KAFKA_ADVERTISED_LISTENERS"] == "PLAINTEXT://127.0.0.1:40123"
    assert env["KAFKA_LISTENERS"].startswith("PLAINTEXT://0.0.0.0:9092,")


def test_one_kraft_node_votes_for_itself_on_its_controller_listener() -> None:
    env = apache_kafka_env("127.0.0.1", 40123)
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    controller = env["KAFKA_LISTENERS"].split("CONTROLLER://")[1]
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"] == f"{env['KAFKA_NODE_ID']}@{controller}"
    names = dict(p.split(":") for p in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    assert set(names) == {"PLAINTEXT", env["KAFKA_CONTROLLER_LISTENER_NAMES"]}


def test_single_node_internal_topics_need_one_replica() -> None:
    env = apache_kafka_env("127.0.0.1", 40123)
    assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == "1"
    assert env["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == "1"
    assert APACHE_KAFKA_IMAGE.startswith("apache/kafka:4.")
