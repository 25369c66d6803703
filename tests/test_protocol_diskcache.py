"""The start-up cache gives back exactly what a fresh build gives, and never gets in
the way: corrupt entries, unsafe directories and the off switch all fall back to
building."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dissector.protocol import diskcache
from dissector.protocol.bundled import bundled_api_names, load_specs


@pytest.fixture
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv(diskcache.ENV_SWITCH, raising=False)
    return tmp_path / "kafka-dissector" / "protocol"


class Builder:
    """Counts its calls, so a test can tell a cache hit from a build."""

    def __init__(self, value: object) -> None:
        self.value = value
        self.calls = 0

    def __call__(self) -> object:
        self.calls += 1
        return self.value


def test_cached_specs_equal_a_fresh_build(cache_home: Path) -> None:
    first = diskcache.load_or_build("specs", load_specs)  # builds and stores
    assert len(list(cache_home.glob("specs-*.pickle"))) == 1
    again = diskcache.load_or_build("specs", lambda: pytest.fail("should load, not build"))
    fresh = load_specs()
    assert again.layouts == fresh.layouts == first.layouts
    assert again.names == fresh.names == bundled_api_names()


def test_second_call_loads_instead_of_building(cache_home: Path) -> None:
    build = Builder({"a": (1, 2)})
    assert diskcache.load_or_build("t", build) == {"a": (1, 2)}
    assert diskcache.load_or_build("t", build) == {"a": (1, 2)}
    assert build.calls == 1


def test_corrupt_entry_is_rebuilt_and_replaced(cache_home: Path) -> None:
    build = Builder([1, 2, 3])
    diskcache.load_or_build("t", build)
    (entry,) = cache_home.glob("t-*.pickle")
    entry.write_bytes(b"\x80\x05not a pickle")
    assert diskcache.load_or_build("t", build) == [1, 2, 3]
    assert build.calls == 2
    assert diskcache.load_or_build("t", build) == [1, 2, 3]
    assert build.calls == 2  # the rebuilt entry is good again


def test_entries_of_other_keys_are_removed(cache_home: Path) -> None:
    cache_home.mkdir(parents=True, mode=0o700)
    stale = cache_home / "t-000000000000000000000000.pickle"
    stale.write_bytes(b"old")
    diskcache.load_or_build("t", Builder(1))
    assert not stale.exists()
    assert len(list(cache_home.glob("t-*.pickle"))) == 1


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="ownership checks are POSIX-only")
def test_a_directory_others_can_write_is_not_used(cache_home: Path) -> None:
    cache_home.mkdir(parents=True)
    cache_home.chmod(0o777)
    build = Builder("x")
    assert diskcache.load_or_build("t", build) == "x"
    assert diskcache.load_or_build("t", build) == "x"
    assert build.calls == 2
    assert list(cache_home.iterdir()) == []


def test_off_switch_builds_every_time_and_writes_nothing(
    cache_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(diskcache.ENV_SWITCH, "off")
    build = Builder("x")
    diskcache.load_or_build("t", build)
    diskcache.load_or_build("t", build)
    assert build.calls == 2
    assert not cache_home.exists()


def test_unwritable_location_still_builds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    monkeypatch.delenv(diskcache.ENV_SWITCH, raising=False)
    build = Builder("x")
    assert diskcache.load_or_build("t", build) == "x"
    assert diskcache.load_or_build("t", build) == "x"
    assert build.calls == 2


@pytest.mark.parametrize("name", ["kafka-python", "kio", "pandas", "Kafka_Python", "pyarrow"])
def test_package_version_agrees_with_importlib_metadata(name: str) -> None:
    from importlib import metadata

    assert diskcache.package_version(name) == metadata.version(name)


def test_package_version_of_a_missing_package_is_absent() -> None:
    assert diskcache.package_version("no-such-distribution-kd") == "absent"


def test_package_version_takes_the_first_install_along_sys_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from importlib import metadata

    for where, version in (("a", "2.0"), ("b", "1.0")):
        info = tmp_path / where / f"kd_probe_pkg-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: kd-probe-pkg\nVersion: {version}\n"
        )
    monkeypatch.setattr("sys.path", [str(tmp_path / "a"), str(tmp_path / "b")])
    assert diskcache.package_version("kd.probe_pkg") == metadata.version("kd-probe-pkg") == "2.0"
