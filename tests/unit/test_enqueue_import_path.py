"""The former import path of the enqueue helper still serves the same objects."""

import mailbus_client.enqueue as client_enqueue
import relay.enqueue as former_path


def test_relay_enqueue_is_the_client_helper() -> None:
    for name in former_path.__all__:
        assert getattr(former_path, name) is getattr(client_enqueue, name)
