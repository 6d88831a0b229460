"""A stand-in device process for the spool tests: publishes while its broker is unreachable, then waits to be killed.

    python -m tests.mqtt.spool_child '<MqttSettings JSON>' <topic> <count>

Prints "spooled <n>" once every message is in the spool, then sleeps until the test kills it (SIGKILL:
no clean shutdown, like a power-cycled agent).
"""

from __future__ import annotations

import sys
import time

from edge_sdk.mqtt import MqttClient, MqttSettings


def main(settings_json: str, topic: str, count: int) -> None:
    client = MqttClient(MqttSettings.model_validate_json(settings_json))
    client.start()
    spooled = sum(client.publish(topic, str(i), qos=1).spooled for i in range(count))
    print(f"spooled {spooled}", flush=True)
    while True:
        time.sleep(60)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
