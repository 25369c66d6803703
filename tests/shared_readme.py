"""What ../shared/captures/README.md says each capture holds (an independent decoder's counts).

Transcribed once here so that every test comparing with it reads the same numbers.
"""

from __future__ import annotations

# file -> (ports to pass or None, {(api_name, version): count of requests},
#          pairs matched, orphan responses, unanswered requests)
EXPECTED: dict[str, tuple[list[int] | None, dict[tuple[str, int], int], int, int, int]] = {
    "ndpi-kafka.pcapng": (
        None,
        {
            ("Produce", 3): 2,
            ("Produce", 9): 1,
            ("Metadata", 2): 4,
            ("Metadata", 12): 1,
            ("ApiVersions", 0): 4,
            ("ApiVersions", 3): 1,
            ("InitProducerId", 4): 1,
        },
        11,
        3,
        3,
    ),
    "ndpi-kafka-2024.pcap": (
        None,
        {("Produce", 3): 2, ("Metadata", 2): 4, ("ApiVersions", 0): 4},
        7,
        3,
        3,
    ),
    "ndpi-kafka-2023.pcapng": (
        None,
        {("ApiVersions", 3): 1, ("Metadata", 12): 1, ("InitProducerId", 4): 1, ("Produce", 9): 1},
        4,
        0,
        0,
    ),
    "go-sniffer-kafka.pcap": (None, {("Produce", 1): 1, ("Metadata", 0): 1}, 2, 0, 0),
    "deepflow-00-produce-v2.pcap": (None, {("Produce", 2): 1}, 1, 0, 0),
    "deepflow-00-produce-v7-sw8.pcap": (None, {("Produce", 7): 1}, 1, 0, 0),
    "deepflow-00-produce-v9.pcap": (None, {("Produce", 9): 1}, 1, 0, 0),
    "deepflow-produce-v9-old.pcap": (None, {("Produce", 9): 1}, 0, 0, 1),
    "deepflow-18-api-versions-v3.pcap": (None, {("ApiVersions", 3): 1}, 1, 0, 0),
    "deepflow-11-join-group-v7.pcap": (None, {("JoinGroup", 7): 1}, 1, 0, 0),
    "deepflow-13-leave-group-v4.pcap": (None, {("LeaveGroup", 4): 1}, 1, 0, 0),
    "deepflow-14-sync-group-v5.pcap": (None, {("SyncGroup", 5): 1}, 1, 0, 0),
    "deepflow-01-fetch-v12-ok.pcap": (None, {("Fetch", 12): 1}, 1, 0, 0),
    "deepflow-01-fetch-v12-perf.pcap": (None, {("Fetch", 12): 1}, 1, 0, 0),
    "deepflow-mixed-with-unsupported.pcap": (
        None,
        {("Fetch", 13): 1, ("OffsetCommit", 8): 1, ("Heartbeat", 4): 1},
        3,
        0,
        0,
    ),
    "arkime-kafka.pcap": (None, {("ListOffsets", 0): 1}, 0, 0, 1),
    "local-tansu-confluent-kafka.pcapng": (
        None,
        {
            ("Produce", 10): 16,
            ("Fetch", 16): 7,
            ("ListOffsets", 7): 10,
            ("Metadata", 12): 11,
            ("OffsetCommit", 9): 4,
            ("OffsetFetch", 9): 2,
            ("FindCoordinator", 2): 3,
            ("JoinGroup", 5): 2,
            ("Heartbeat", 3): 1,
            ("LeaveGroup", 1): 1,
            ("SyncGroup", 3): 1,
            ("ListGroups", 5): 1,
            ("ApiVersions", 3): 13,
            ("CreateTopics", 4): 1,
            ("DescribeConfigs", 1): 1,
            ("ConsumerGroupDescribe", 0): 1,
            ("GetTelemetrySubscriptions", 0): 9,
        },
        84,
        0,
        0,
    ),
}
