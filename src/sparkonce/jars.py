"""Sets of Maven jars that sparkonce resolves once and then reads from a directory: Apache Kafka's broker (the
embedded broker of the local tooling) and the S3A file system (checkpoints on ``s3a://``).

Each set is a pom shipped in this package (``sparkonce/jvm/<name>/pom.xml``; nothing is built from it), resolved
by Maven's ``dependency:copy-dependencies`` into ``<jars home>/<name>-<pom digest>``. The jars home is
``$SPARKONCE_JARS_HOME``, else ``$XDG_CACHE_HOME/sparkonce/jars``, else ``~/.cache/sparkonce/jars``: one per user,
shared by every checkout and virtualenv, so an installed wheel finds what ``scripts/setup.sh`` (or
``sparkonce jars fetch``) resolved. The digest in the directory's name makes a changed pom resolve anew. Maven
copies into a temporary sibling that is renamed into place once complete, so a half-copied set is never used.

Runs on the machine that starts the JVM (the CLI, a test session, a driver); nothing here runs on executors.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from sparkonce.errors import JarsError

JarSetName = Literal["kafka", "s3a"]
"""``kafka``: Apache Kafka's broker (``org.apache.kafka:kafka_2.13``); ``s3a``: ``org.apache.hadoop:hadoop-aws`` and
the AWS SDK modules it loads."""

JARS_HOME_ENV = "SPARKONCE_JARS_HOME"
"""The environment variable naming the directory that holds the resolved jar sets."""

_POMS = Path(__file__).resolve().parent / "jvm"


@dataclass(frozen=True)
class JarSet:
    """One set of Maven jars: its pom in this package and the directory it resolves into. Runs on the driver."""

    name: JarSetName
    what: str
    """What the jars are for, in messages."""

    @property
    def pom(self) -> Path:
        """The pom that lists the set (``sparkonce/jvm/<name>/pom.xml``)."""
        return _POMS / self.name / "pom.xml"

    @property
    def resources(self) -> Path:
        """The pom's directory, which also holds the set's configuration files (the broker's log4j2.properties)."""
        return self.pom.parent

    @property
    def directory(self) -> Path:
        """Where the set's jars are (or will be) copied: ``<jars home>/<name>-<12 hex digits of the pom's digest>``."""
        digest = hashlib.sha256(self.pom.read_bytes()).hexdigest()[:12]
        return jars_home() / f"{self.name}-{digest}"

    def resolved(self) -> Path | None:
        """The set's directory when it was resolved completely, else None."""
        directory = self.directory
        return directory if directory.is_dir() and any(directory.glob("*.jar")) else None

    def require(self) -> Path:
        """The set's directory.

        Raises:
            JarsError: the set was not resolved; the message names the command that resolves it.
        """
        found = self.resolved()
        if found is None:
            raise JarsError(
                f"the jars of {self.what} are not in {self.directory}: run `sparkonce jars fetch {self.name}` "
                f"(needs Maven: `apt-get install maven`), or `bash scripts/setup.sh` in a checkout; "
                f"{JARS_HOME_ENV} chooses another jars home"
            )
        return found

    def classpath(self) -> list[Path]:
        """Every jar of the resolved set, sorted by name.

        Raises:
            JarsError: the set was not resolved.
        """
        return sorted(self.require().glob("*.jar"))

    def fetch(self, *, maven: str = "mvn", timeout: float = 1800.0) -> Path:
        """Resolve the set with Maven unless it is resolved already; return its directory.

        Maven runs on a copy of the pom in a temporary directory (the package may be read-only) and copies the
        runtime jars into a temporary sibling of :attr:`directory`, renamed into place once complete.

        Raises:
            JarsError: Maven is missing, failed (the message holds the end of its output) or timed out.
        """
        found = self.resolved()
        if found is not None:
            return found
        executable = shutil.which(maven)
        if executable is None:
            raise JarsError(
                f"Maven (`{maven}`) is not installed, needed to fetch the jars of {self.what}: `apt-get install maven`"
            )
        target = self.directory
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=f".{self.name}-", dir=target.parent) as scratch:
            work = Path(scratch)
            shutil.copy(self.pom, work / "pom.xml")
            copied = work / "jars"
            command = [
                executable,
                "-B",
                "-q",
                "-f",
                str(work / "pom.xml"),
                "dependency:copy-dependencies",
                f"-DoutputDirectory={copied}",
                "-DincludeScope=runtime",
            ]
            try:
                done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
            except subprocess.TimeoutExpired as err:
                raise JarsError(f"Maven did not resolve the jars of {self.what} within {timeout:.0f}s") from err
            if done.returncode != 0 or not any(copied.glob("*.jar")):
                tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
                raise JarsError(
                    f"Maven failed to resolve the jars of {self.what} from {self.pom} (exit {done.returncode}):\n{tail}"
                )
            try:
                copied.rename(target)
            except OSError:
                if self.resolved() is None:  # not another fetch that finished first
                    raise
        return target


KAFKA = JarSet("kafka", "Apache Kafka's broker (org.apache.kafka:kafka_2.13)")
S3A = JarSet("s3a", "the S3A file system (org.apache.hadoop:hadoop-aws and the AWS SDK's S3 modules)")
JAR_SETS: dict[JarSetName, JarSet] = {KAFKA.name: KAFKA, S3A.name: S3A}


def jars_home() -> Path:
    """The directory that holds the resolved jar sets (see the module docstring)."""
    override = os.environ.get(JARS_HOME_ENV)
    if override:
        return Path(override).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "sparkonce" / "jars"


__all__ = ["JARS_HOME_ENV", "JAR_SETS", "KAFKA", "S3A", "JarSet", "JarSetName", "jars_home"]
