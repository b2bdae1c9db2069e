"""The independent Kafka client of the tests (kafka-python): reads a topic from the
start through a consumer group and prints one JSON object per message:
{"key", "partition", "offset", "value"} (value parsed from JSON).

usage: consume.py BROKER TOPIC COUNT TIMEOUT_SECONDS
Stops after COUNT messages, or when TIMEOUT_SECONDS pass without reaching them.
"""

import json
import sys
import time
import uuid

from kafka import KafkaConsumer


def main():
    broker, topic, count, timeout = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=broker,
        group_id=f"tether-test-{uuid.uuid4()}",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        # Answer as soon as a message is there (the default waits up to 500 ms).
        fetch_max_wait_ms=10,
    )
    deadline = time.monotonic() + timeout
    seen = 0
    while seen < count and time.monotonic() < deadline:
        batches = consumer.poll(timeout_ms=200)
        for records in batches.values():
            for record in records:
                print(
                    json.dumps(
                        {
                            "key": record.key.decode() if record.key is not None else None,
                            "partition": record.partition,
                            "offset": record.offset,
                            "value": json.loads(record.value),
                        }
                    ),
                    flush=True,
                )
                seen += 1
    consumer.close()


if __name__ == "__main__":
    main()
