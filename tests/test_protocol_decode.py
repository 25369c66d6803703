"""Behaviour of the decoder on edge cases, with messages built by kio's encoder."""

from __future__ import annotations

import dataclasses
import io
import struct
import uuid
from typing import Any

import pytest

from dissector.protocol import (
    TopicNames,
    api_name,
    decode_request,
    decode_response,
    error_name,
    summarize,
)

pytest.importorskip("kio")
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer


def kio_frame(entity: Any, **header: Any) -> bytes:
    """Header (kio's header class for this message) + body, both written by kio."""
    cls = type(entity)
    header_cls = cls.__header_schema__
    names = {f.name for f in dataclasses.fields(header_cls)}
    values = {k: v for k, v in header.items() if k in names}
    buf = io.BytesIO()
    entity_writer(header_cls)(buf, header_cls(**values))
    entity_writer(cls)(buf, entity)
    return buf.getvalue()


def request_frame(entity: Any, correlation_id: int = 1) -> bytes:
    return kio_frame(
        entity,
        request_api_key=entity.__api_key__,
        request_api_version=entity.__version__,
        correlation_id=correlation_id,
        client_id="t",
    )


def response_frame(entity: Any, correlation_id: int = 1) -> bytes:
    return kio_frame(entity, correlation_id=correlation_id)


def metadata_v12_request() -> bytes:
    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

    return request_frame(
        MetadataRequest(
            topics=(MetadataRequestTopic(topic_id=uuid.UUID(int=0), name="orders"),),
            allow_auto_topic_creation=True,
            include_topic_authorized_operations=False,
        )
    )


def test_huge_array_count_is_an_error_not_an_allocation() -> None:
    # Metadata v1 request: topics is a nullable int32-counted array.
    frame = struct.pack(">hhih", 3, 1, 9, 1) + b"c" + struct.pack(">i", 0x7FFFFFFF)
    out = decode_request(frame)
    assert out.body is not None
    assert out.error == "topics: array count 2147483647 exceeds the 0 bytes left at offset 11"


def test_truncated_message_keeps_what_was_decoded_and_names_the_field() -> None:
    frame = metadata_v12_request()
    out = decode_request(frame[:-6])
    assert out.error is not None
    assert out.error.startswith("topics[0].name: string of length 6 needs 6 bytes")
    assert out.body == {"topics": [{"topic_id": "00000000-0000-0000-0000-000000000000"}]}


def test_unknown_tagged_fields_are_kept_as_raw_bytes() -> None:
    frame = metadata_v12_request()
    assert frame.endswith(b"\x00")  # empty top-level tag section
    tagged = frame[:-1] + bytes([1, 99, 2]) + b"\xab\xcd"
    out = decode_request(tagged)
    assert out.error is None
    assert out.body is not None
    assert out.body["_unknown_tags"] == {99: b"\xab\xcd"}
    assert out.body["allow_auto_topic_creation"] is True


def test_trailing_bytes_are_counted_not_fatal() -> None:
    out = decode_request(metadata_v12_request() + b"\x00\x01\x02")
    assert out.error is None
    assert out.trailing == 3
    assert out.body is not None and out.body["topics"][0]["name"] == "orders"


def test_api_versions_unsupported_version_answer_uses_the_v0_layout() -> None:
    from kio.schema.api_versions.v0.response import ApiVersion, ApiVersionsResponse

    answer = ApiVersionsResponse(
        error_code=ErrorCode.unsupported_version,
        api_keys=(ApiVersion(api_key=18, min_version=0, max_version=3),),
    )
    out = decode_response(response_frame(answer, 5), 18, 4)
    assert out.error is None
    assert out.body == {
        "error_code": 35,
        "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 3}],
    }
    assert out.notes == ["unsupported_version: body decoded with the v0 layout"]
    summary = summarize(18, 4, None, out, TopicNames())
    assert (summary.error_code, summary.error_name) == (35, "UNSUPPORTED_VERSION")


def test_sasl_authenticate_bytes_stay_bytes() -> None:
    from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

    out = decode_request(request_frame(SaslAuthenticateRequest(auth_bytes=b"\x00user\x00pw")))
    assert out.body == {"auth_bytes": b"\x00user\x00pw"}
    out = decode_request(request_frame(SaslHandshakeRequest(mechanism="SCRAM-SHA-512")))
    assert out.body == {"mechanism": "SCRAM-SHA-512"}


def test_unknown_error_codes_stay_numbers() -> None:
    # Heartbeat v0 response: error_code only. 9999 is not a Kafka error code.
    out = decode_response(struct.pack(">ih", 3, 9999), 12, 0)
    assert out.body == {"error_code": 9999}
    s = summarize(12, 0, None, out, TopicNames())
    assert s.error_code == 9999
    assert s.error_name is None
    assert error_name(3) == "UNKNOWN_TOPIC_OR_PARTITION"


def test_unknown_api_key_and_version_decode_the_header_only() -> None:
    out = decode_request(struct.pack(">hhih", 1000, 1, 7, 2) + b"id" + b"\x00" * 10)
    assert out.header == {
        "request_api_key": 1000,
        "request_api_version": 1,
        "correlation_id": 7,
        "client_id": "id",
    }
    assert out.body is None
    assert out.error == "unknown_api_key: no request spec for api_key 1000"
    assert api_name(4) == "LeaderAndIsr"
    assert api_name(7) == "ControlledShutdown"
    assert api_name(1000) == "Unknown(1000)"
    out = decode_request(struct.pack(">hhih", 0, 99, 7, -1))
    assert out.error is not None and out.error.startswith("unsupported_version")
    assert out.header["client_id"] is None


def test_topic_ids_learnt_from_metadata_name_fetch_topics() -> None:
    from kio.schema.fetch.v13.response import (
        FetchableTopicResponse,
        FetchResponse,
        PartitionData,
    )
    from kio.schema.metadata.v12.response import MetadataResponse, MetadataResponseTopic

    tid = uuid.UUID("6b5a7e0c-6a4e-4d8e-9c1b-3f2b7a9d0e11")
    metadata = MetadataResponse(
        throttle_time=_ms(0),
        brokers=(),
        cluster_id=None,
        controller_id=1,
        topics=(
            MetadataResponseTopic(
                error_code=ErrorCode.none,
                name="payments",
                topic_id=tid,
                is_internal=False,
                partitions=(),
                topic_authorized_operations=0,
            ),
        ),
    )
    names = TopicNames()
    md = decode_response(response_frame(metadata), 3, 12)
    assert md.error is None
    summarize(3, 12, None, md, names)
    assert names.name(str(tid)) == "payments"

    partition = PartitionData(
        partition_index=0,
        error_code=ErrorCode.not_leader_or_follower,
        high_watermark=10,
        last_stable_offset=10,
        log_start_offset=0,
        aborted_transactions=None,
        preferred_read_replica=-1,
        records=None,
    )
    fetch = FetchResponse(
        throttle_time=_ms(7),
        error_code=ErrorCode.none,
        session_id=0,
        responses=(FetchableTopicResponse(topic_id=tid, partitions=(partition,)),),
    )
    resp = decode_response(response_frame(fetch), 1, 13)
    assert resp.error is None
    s = summarize(1, 13, None, resp, names)
    assert s.topics == ["payments"]
    assert (s.error_code, s.error_name, s.error_count) == (6, "NOT_LEADER_OR_FOLLOWER", 1)
    assert s.partitions == 1
    assert s.throttle_ms == 7
    names.annotate(resp.body)
    assert resp.body is not None
    assert resp.body["responses"][0]["topic_name"] == "payments"


def _ms(n: int) -> Any:
    import datetime

    return datetime.timedelta(milliseconds=n)


def test_topic_ids_from_describe_topic_partitions_name_share_fetch_topics() -> None:
    from kio.schema.describe_topic_partitions.v0.response import (
        DescribeTopicPartitionsResponse,
        DescribeTopicPartitionsResponseTopic,
    )
    from kio.schema.share_fetch.v1.response import (
        LeaderIdAndEpoch,
        PartitionData,
        ShareFetchableTopicResponse,
        ShareFetchResponse,
    )

    tid = uuid.UUID("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")
    describe = DescribeTopicPartitionsResponse(
        throttle_time=_ms(0),
        topics=(
            DescribeTopicPartitionsResponseTopic(
                error_code=ErrorCode.none,
                name="shipments",
                topic_id=tid,
                is_internal=False,
                partitions=(),
                topic_authorized_operations=0,
            ),
        ),
        next_cursor=None,
    )
    share = ShareFetchResponse(
        throttle_time=_ms(0),
        error_code=ErrorCode.none,
        error_message=None,
        acquisition_lock_timeout=_ms(30000),
        responses=(
            ShareFetchableTopicResponse(
                topic_id=tid,
                partitions=(
                    PartitionData(
                        partition_index=2,
                        error_code=ErrorCode.none,
                        error_message=None,
                        acknowledge_error_code=ErrorCode.none,
                        acknowledge_error_message=None,
                        current_leader=LeaderIdAndEpoch(leader_id=1, leader_epoch=3),
                        records=b"",
                        acquired_records=(),
                    ),
                ),
            ),
        ),
        node_endpoints=(),
    )
    names = TopicNames()
    # before the describe response, only the id is known
    early = decode_response(response_frame(share), 78, 1)
    assert early.error is None
    assert summarize(78, 1, None, early, names).topics == [str(tid)]
    described = decode_response(response_frame(describe), 75, 0)
    assert described.error is None
    summarize(75, 0, None, described, names)
    late = decode_response(response_frame(share), 78, 1)
    s = summarize(78, 1, None, late, names)
    assert s.topics == ["shipments"]
    assert (s.partitions, s.error_code, s.error_count) == (1, 0, 0)
