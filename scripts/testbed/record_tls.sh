#!/usr/bin/env bash
# Records the TLS captures of captures/tls/ (see captures/README.md): four broker runs
# (default suites, AES-128-GCM only, ChaCha20-Poly1305 only, RSA key exchange only), each
# with the broker-side key log of the extract-tls-secrets javaagent, and the clients' own
# key logs; for the RSA key exchange also the pre-master key logs (scripts/testbed/pms_keylog.py).
# The keyupdate set: a broker with a small TLS key usage limit (KAFKA_TLS_KEY_LIMIT), so that
# a bulk workload crosses it many times and the capture holds TLS 1.3 KeyUpdates.
#
#   scripts/testbed/record_tls.sh [OUT_DIR] [SET]   # default captures/tls, all; SET: all, rsa or keyupdate
#
# Uses the test bed broker on its own ports and state dir so that it does not collide
# with a broker on the default ones; every key here is throw-away.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${1:-captures/tls}"
SET="${2:-all}"
mkdir -p "$OUT"
WORK="$(mktemp -d)"
trap 'scripts/kafka-broker stop >/dev/null 2>&1 || true; rm -rf "$WORK"' EXIT
export KAFKA_BROKER_DIR="$WORK/broker" KAFKA_PLAINTEXT_PORT=29092 KAFKA_CONTROLLER_PORT=29093 \
    KAFKA_SASL_PORT=39092 KAFKA_SSL_PORT="${KAFKA_SSL_PORT:-9095}" \
    KAFKA_SASL_SSL_PORT="${KAFKA_SASL_SSL_PORT:-9096}" KAFKA_REQUEST_LOG=1
BROKER_KEYS="$WORK/broker-keys.log"
export KAFKA_TLS_KEYLOG="$BROKER_KEYS"

# One capture; the broker's key log lines written meanwhile go to NAME.broker.keys, its
# request log's account of the capture's port to NAME.requests.jsonl (the oracle).
record() {
    local name="$1"
    shift
    local before=0 requests_before=0 log="$KAFKA_BROKER_DIR/request.log"
    [[ -f "$BROKER_KEYS" ]] && before=$(stat -c %s "$BROKER_KEYS")
    [[ -f "$log" ]] && requests_before=$(stat -c %s "$log")
    python -m scripts.testbed.tls_driver --name "$name" --out-dir "$OUT" "$@"
    sleep 1
    tail -c +"$((before + 1))" "$BROKER_KEYS" >"$OUT/$name.broker.keys"
    tail -c +"$((requests_before + 1))" "$log" >"$WORK/requests.log"
    python -m scripts.testbed.request_log "$WORK/requests.log" --jsonl \
        --port "$(python -c "import json,sys; print(json.load(open(sys.argv[1]))['operations'][0]['port'])" "$OUT/$name.drivers.json")" \
        >"$OUT/$name.requests.jsonl"
}

run_broker() {
    scripts/kafka-broker stop >/dev/null 2>&1 || true
    KAFKA_SSL_CIPHER_SUITES="${1:-}" KAFKA_TLS_KEY_LIMIT="${2:-}" scripts/kafka-broker start
}

record_rsa() {
    run_broker "TLS_RSA_WITH_AES_128_GCM_SHA256,TLS_AES_128_GCM_SHA256"
    local name
    for name in tls12-rsa-kafka-python tls12-rsa-noems-kafka-python; do
        local extra=()
        [[ "$name" == *noems* ]] && extra=(--no-ems)
        record "$name" --tls 1.2 --ciphers AES128-GCM-SHA256 "${extra[@]}"
        python -m scripts.testbed.pms_keylog "$OUT/$name.pcapng" "$KAFKA_BROKER_DIR/tls/broker.key" \
            --rsa "$OUT/$name.rsa.keys" --pms "$OUT/$name.pms.keys"
    done
}

# The broker's JSSE sends a KeyUpdate (update_requested) each time it has sent, or received,
# KAFKA_TLS_KEY_LIMIT bytes under one key; OpenSSL answers with its own, the Java client
# (the same limit) sends its own too. Incompressible records, no codec: 100 KB each way
# (Produce, then Fetch in 16 KiB parts) under keys that last 8 KiB.
record_keyupdate() {
    run_broker "" "2^13"
    local bulk=(--records 100 --record-size 1000 --fetch-bytes 16384)
    record tls13-keyupdate-kafka-python "${bulk[@]}" --codec none
    record tls13-keyupdate-java --client java "${bulk[@]}"
}

case "$SET" in
    rsa)
        record_rsa
        exit 0
        ;;
    keyupdate)
        record_keyupdate
        exit 0
        ;;
    all) ;;
    *)
        echo "record_tls.sh: SET is all, rsa or keyupdate, not $SET" >&2
        exit 64
        ;;
esac

run_broker ""
record tls13-kafka-python
record tls12-kafka-python --tls 1.2
record sasl-ssl-aiokafka --client aiokafka --sasl
record tls13-confluent --client confluent-kafka
record tls12-java --client java --tls 1.2
record plaintext-kafka-python --plaintext
rm -f "$OUT/plaintext-kafka-python.keys" "$OUT/plaintext-kafka-python.broker.keys"

run_broker "TLS_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"
record tls13-aes128-aiokafka --client aiokafka

run_broker "TLS_CHACHA20_POLY1305_SHA256,TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256"
record tls13-chacha-kafka-python
record tls12-chacha-kafka-python --tls 1.2 --ciphers ECDHE+CHACHA20

record_rsa
record_keyupdate
