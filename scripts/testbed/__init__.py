"""Traffic drivers for the Apache Kafka test bed (scripts/kafka-broker).

Each driver runs real Kafka clients against the loopback broker and writes a ledger: a JSON
record of what the client itself did and saw (operations, records per topic and codec, group
ids, expected errors). End-to-end tests compare the dissector's output against that ledger,
so the oracle is the client, never the dissector.
"""
