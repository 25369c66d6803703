"""scripts/testbed/request_log.py on lines in the broker's format (no broker needed).

The broker test (tests/test_broker_request_log.py) reads real logs; these pin the parts a
real run may not reach: rolled files, error-code rules, lines that are not requests.
"""

from __future__ import annotations

import json
from pathlib import Path

from scripts.testbed.request_log import (
    Endpoint,
    log_files,
    parse_line,
    read_request_log,
    summary_error,
)


def line(response: dict[str, object] | None, *, correlation_id: int = 7) -> str:
    doc = {
        "isForwarded": False,
        "requestHeader": {
            "requestApiKey": 1,
            "requestApiVersion": 17,
            "correlationId": correlation_id,
            "clientId": "c1",
            "requestApiKeyName": "FETCH",
        },
        "request": {"maxWaitMs": 500},
        "response": response,
        "connection": "127.0.0.1:9092-127.0.0.1:51234-0-3",
        "totalTimeMs": 12.5,
        "requestQueueTimeMs": 0.1,
        "localTimeMs": 1.0,
        "remoteTimeMs": 10.0,
        "throttleTimeMs": 0,
        "responseQueueTimeMs": 0.2,
        "sendTimeMs": 0.5,
        "securityProtocol": "SASL_PLAINTEXT",
        "principal": "User:alice",
        "listener": "SASL_PLAINTEXT",
        "clientInformation": {"softwareName": "librdkafka", "softwareVersion": "2.16.0"},
    }
    return "[2026-01-02T10:11:12,345+01:00] Completed request:" + json.dumps(doc)


def test_a_completed_request_line() -> None:
    fetch = {
        "throttleTimeMs": 3,
        "errorCode": 0,
        "responses": [{"partitions": [{"errorCode": 0}, {"errorCode": 1}]}],
    }
    r = parse_line(line(fetch))
    assert r is not None
    assert (r.api_key, r.api_name, r.api_version, r.correlation_id) == (1, "FETCH", 17, 7)
    assert r.client_id == "c1"
    assert r.broker == Endpoint("127.0.0.1", 9092)
    assert r.client == Endpoint("127.0.0.1", 51234)
    assert r.key == (9092, 51234, 7)
    assert (r.listener, r.principal) == ("SASL_PLAINTEXT", "User:alice")
    assert r.time.isoformat() == "2026-01-02T10:11:12.345000+01:00"
    assert r.in_broker_ms == 12.0
    assert (r.response_throttle_ms, r.error_code, r.error_count) == (3, 1, 1)
    assert r.software_name == "librdkafka"


def test_error_rules_follow_the_schema() -> None:
    # The top-level code wins when non-zero; else the first non-zero nested one.
    assert summary_error({"errorCode": 15, "topics": [{"errorCode": 3}]}) == (15, 2)
    assert summary_error({"topics": [{"errorCode": 0}, {"partitionErrorCode": 3}]}) == (3, 1)
    assert summary_error({"errorCode": 0, "topics": []}) == (0, 0)
    assert summary_error({"throttleTimeMs": 0}) == (None, 0)
    assert summary_error(None) == (None, 0)


def test_other_lines_and_a_missing_response_are_tolerated() -> None:
    assert parse_line("[2026-01-02T10:11:12,345+01:00] WARN something else") is None
    assert parse_line("") is None
    r = parse_line(line(None))
    assert r is not None
    assert (r.error_code, r.response_throttle_ms) == (None, None)


def test_rolled_files_are_read_oldest_first(tmp_path: Path) -> None:
    # log4j2's DefaultRolloverStrategy: request.log.1 is the newest rolled file.
    (tmp_path / "request.log.2").write_text(line({}, correlation_id=1) + "\n")
    (tmp_path / "request.log.1").write_text(line({}, correlation_id=2) + "\n")
    (tmp_path / "request.log").write_text(line({}, correlation_id=3) + "\n")
    (tmp_path / "request.log.bak").write_text(line({}, correlation_id=99) + "\n")
    assert [p.name for p in log_files(tmp_path)] == [
        "request.log.2",
        "request.log.1",
        "request.log",
    ]
    assert [r.correlation_id for r in read_request_log(tmp_path)] == [1, 2, 3]
