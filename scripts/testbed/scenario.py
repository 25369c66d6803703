"""Run traffic drivers against the test bed broker while capturing, and write the capture
plus one JSON document holding every driver's ledger.

    scripts/kafka-broker start
    python -m scripts.testbed.scenario --preset mixed --out-dir captures --name kafka-4-mixed
    scripts/kafka-broker stop

The broker must be running (scripts/kafka-broker start); this module never starts it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scripts.testbed.broker_log import dump_topics, summary
from scripts.testbed.capture import Capture, bpf_filter

REPO_ROOT = Path(__file__).resolve().parents[2]
KAFKA_BROKER = REPO_ROOT / "scripts" / "kafka-broker"
DRIVER_TIMEOUT_S = 240

# Driver name -> (module, extra arguments per preset). Counts stay small in "mixed" so the
# committed capture is compact; "full" is what the end-to-end tests drive.
DRIVERS: dict[str, str] = {
    "confluent": "scripts.testbed.confluent_driver",
    "kafka-python": "scripts.testbed.kafka_python_driver",
    "aiokafka": "scripts.testbed.aiokafka_driver",
    "java": "scripts.testbed.java_driver",
    "raw": "scripts.testbed.raw_driver",
}
PRESETS: dict[str, dict[str, list[str]]] = {
    "mixed": {
        "confluent": ["--per-codec", "10"],
        "kafka-python": ["--per-codec", "5"],
        "aiokafka": ["--per-codec", "5"],
        "java": ["--records", "10"],
        "raw": [],
    },
    "full": {
        "confluent": ["--per-codec", "40"],
        "kafka-python": ["--per-codec", "20"],
        "aiokafka": ["--per-codec", "20"],
        "java": ["--records", "25"],
        "raw": [],
    },
}


@dataclass(frozen=True, slots=True)
class ScenarioResult:
    capture: Path
    ledger: Path
    exit_codes: dict[str, int]
    capture_tool: str

    @property
    def ok(self) -> bool:
        return all(rc == 0 for rc in self.exit_codes.values())


def broker_env() -> dict[str, str]:
    out = subprocess.run(
        [str(KAFKA_BROKER), "env"], capture_output=True, text=True, check=True, timeout=30
    ).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def run_driver(name: str, args: list[str], ledger: Path, log: Path) -> int:
    cmd = [sys.executable, "-m", DRIVERS[name], *args, "--ledger", str(ledger)]
    env = os.environ | {"PYTHONPATH": str(REPO_ROOT)}
    with log.open("w") as out:
        try:
            done = subprocess.run(
                cmd,
                cwd=REPO_ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=DRIVER_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            out.write(f"\nscenario: {name} driver killed after {DRIVER_TIMEOUT_S}s\n")
            return -1
    return done.returncode


def driver_args(name: str, preset: str, prefix: str, env: dict[str, str]) -> list[str]:
    plaintext = f"127.0.0.1:{env['KAFKA_PLAINTEXT_PORT']}"
    sasl = f"127.0.0.1:{env['KAFKA_SASL_PORT']}"
    args = ["--prefix", prefix, *PRESETS[preset][name]]
    if name == "raw":
        return [*args, "--port", env["KAFKA_PLAINTEXT_PORT"]]
    args += ["--plaintext", plaintext]
    if name in ("confluent", "kafka-python"):
        args += ["--sasl", sasl]
    return args


def run_scenario(
    out_dir: Path, name: str, preset: str, prefix: str, drivers: list[str]
) -> ScenarioResult:
    env = broker_env()
    ports = (int(env["KAFKA_PLAINTEXT_PORT"]), int(env["KAFKA_SASL_PORT"]))
    capture_path = out_dir / f"{name}.pcapng"
    ledger_path = out_dir / f"{name}.drivers.json"
    exit_codes: dict[str, int] = {}
    ledgers: list[dict[str, Any]] = []
    logs: dict[str, str] = {}
    started = time.time()
    with (
        tempfile.TemporaryDirectory(prefix="kafka-scenario-") as tmp,
        Capture(capture_path, ports=ports) as cap,
    ):
        for driver in drivers:
            ledger = Path(tmp) / f"{driver}.json"
            log = Path(tmp) / f"{driver}.log"
            exit_codes[driver] = run_driver(
                driver, driver_args(driver, preset, prefix, env), ledger, log
            )
            logs[driver] = log.read_text()[-4000:]
            if ledger.exists():
                ledgers.append(json.loads(ledger.read_text()))
    # After the capture: DumpLogSegments is a JVM start and reads files, no network.
    broker_log = summary(dump_topics(Path(env["KAFKA_BROKER_DIR"]) / "data", prefix))
    doc = {
        "capture": capture_path.name,
        "capture_tool": cap.tool,
        "capture_filter": bpf_filter(ports),
        "broker": {
            "kafka": env["KAFKA_VERSION"],
            "tools": env["KAFKA_TOOLS_VERSION"],
            "plaintext_port": ports[0],
            "sasl_port": ports[1],
        },
        "preset": preset,
        "prefix": prefix,
        "started": started,
        "finished": time.time(),
        "exit_codes": exit_codes,
        "driver_logs_tail": {k: v for k, v in logs.items() if exit_codes[k] != 0},
        "drivers": ledgers,
        "broker_log": broker_log,
    }
    ledger_path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return ScenarioResult(capture_path, ledger_path, exit_codes, cap.tool)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, required=True)
    parser.add_argument("--name", default="kafka-4-mixed")
    parser.add_argument("--preset", choices=sorted(PRESETS), default="mixed")
    parser.add_argument("--prefix", default="mix")
    parser.add_argument("--drivers", default=",".join(DRIVERS))
    args = parser.parse_args(argv)
    drivers = [d for d in args.drivers.split(",") if d]
    unknown = [d for d in drivers if d not in DRIVERS]
    if unknown:
        parser.error(f"unknown drivers: {unknown}; choose from {sorted(DRIVERS)}")
    result = run_scenario(args.out_dir, args.name, args.preset, args.prefix, drivers)
    print(
        json.dumps(
            {
                "capture": str(result.capture),
                "ledger": str(result.ledger),
                "exit_codes": result.exit_codes,
                "capture_tool": result.capture_tool,
            }
        )
    )
    return 0 if result.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
