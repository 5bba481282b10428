"""A throwaway local PostgreSQL server for tests, benchmarks and the quickstart.

:func:`start_postgres` runs ``initdb`` into a fresh directory and starts the server with ``pg_ctl`` on a free
loopback port, with its Unix socket in the same directory, trust authentication for the ``sparkonce`` role and
``fsync`` off (the data is disposable). :func:`stop_postgres` stops it (fast shutdown) and removes the directory
when sparkonce created it.

PostgreSQL refuses to run as root. When this process is root (containers, CI) the server runs as the
``postgres`` OS user that Debian's ``postgresql`` package creates (or ``$SPARKONCE_PG_OS_USER``), and the data
directory is handed to that user.

Everything here runs on the machine that starts the server (a test session or the CLI), never on Spark
executors.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkonce.errors import SinkError
from sparkonce_local.services.process import LOOPBACK, free_port, log_tail

log = logging.getLogger(__name__)

ENV_BIN_DIR = "SPARKONCE_PG_BIN"
ENV_OS_USER = "SPARKONCE_PG_OS_USER"
ROLE = "sparkonce"
DATABASE = "postgres"

_DEBIAN_BIN_GLOB = "/usr/lib/postgresql/*/bin"


@dataclass(frozen=True)
class PostgresServer:
    """A running throwaway PostgreSQL server."""

    base_dir: Path
    """Holds ``data/`` (the cluster), ``server.log`` and the Unix socket."""
    host: str
    port: int
    user: str
    dbname: str
    bin_dir: Path
    os_user: str | None
    """The OS user the server runs as when started by root; None when it runs as the current user."""
    owns_base_dir: bool
    """True when :func:`start_postgres` created ``base_dir`` and :func:`stop_postgres` removes it."""
    settings: tuple[tuple[str, str], ...] = ()
    """Server settings given to :func:`start_postgres`, passed as ``-c name=value`` after the defaults."""

    @property
    def dsn(self) -> str:
        """A libpq connection URI for the server's ``postgres`` database."""
        return f"postgresql://{self.user}@{self.host}:{self.port}/{self.dbname}"

    @property
    def data_dir(self) -> Path:
        return self.base_dir / "data"

    @property
    def log_file(self) -> Path:
        return self.base_dir / "server.log"


def find_bin_dir() -> Path:
    """Locate the directory holding ``initdb`` and ``pg_ctl``.

    Looks at ``$SPARKONCE_PG_BIN``, then Debian's ``/usr/lib/postgresql/<major>/bin`` (newest major first), then
    ``pg_ctl`` on ``PATH`` (following symlinks so ``initdb`` is found beside it).

    Raises:
        SinkError: no PostgreSQL server binaries were found (``scripts/setup.sh`` installs them).
    """
    override = os.environ.get(ENV_BIN_DIR)
    candidates: list[Path] = []
    if override:
        candidates.append(Path(override))
    debian = sorted(Path("/").glob(_DEBIAN_BIN_GLOB.lstrip("/")), key=_major_version, reverse=True)
    candidates.extend(debian)
    on_path = shutil.which("pg_ctl")
    if on_path:
        candidates.append(Path(on_path).resolve().parent)
    for directory in candidates:
        if all(os.access(directory / tool, os.X_OK) for tool in ("initdb", "pg_ctl")):
            return directory
    if override:
        raise SinkError(f"{ENV_BIN_DIR}={override} holds no executable initdb and pg_ctl")
    raise SinkError(
        "PostgreSQL server binaries (initdb, pg_ctl) not found in /usr/lib/postgresql/*/bin or on PATH; "
        "install Debian's postgresql package (scripts/setup.sh does)"
    )


def _major_version(path: Path) -> int:
    try:
        return int(path.parent.name.split(".")[0])
    except ValueError:
        return -1


def start_postgres(
    base_dir: Path | str | None = None,
    *,
    port: int | None = None,
    timeout: float = 60.0,
    settings: Mapping[str, str] | None = None,
) -> PostgresServer:
    """Create a cluster and start a PostgreSQL server on loopback; return once it accepts connections.

    Args:
        base_dir: an empty or missing directory for the cluster, log and socket; a new temporary directory
            (removed again by :func:`stop_postgres`) when None.
        port: the TCP port; a free one when None.
        timeout: seconds to wait for the server to accept connections.
        settings: server settings (``{"max_prepared_transactions": "0"}``) over the defaults (``fsync`` off,
            ``max_connections`` 50, ``max_prepared_transactions`` 64 for the sink's two-phase protocol).

    Returns:
        The running server; connect with :attr:`PostgresServer.dsn`.

    Raises:
        SinkError: binaries missing, ``initdb`` or ``pg_ctl`` failed, or the server did not become ready in time
            (the message quotes the end of the server log).
    """
    for name, value in (settings or {}).items():
        if not re.fullmatch(r"[a-z_.]+", name) or not re.fullmatch(r"[\w.-]+", value):
            raise SinkError(f"server setting {name}={value!r}: names are [a-z_.], values letters, digits, _ . -")
    bin_dir = find_bin_dir()
    os_user = _server_os_user()
    owns = base_dir is None
    base = Path(tempfile.mkdtemp(prefix="sparkonce-pg-")) if base_dir is None else Path(base_dir).resolve()
    base.mkdir(parents=True, exist_ok=True)
    if (base / "data").exists():
        raise SinkError(f"{base / 'data'} already exists: start_postgres needs a fresh directory")
    if os_user is not None:
        _hand_over(base, os_user)
    chosen = port if port is not None else free_port()
    server = PostgresServer(
        base_dir=base,
        host=LOOPBACK,
        port=chosen,
        user=ROLE,
        dbname=DATABASE,
        bin_dir=bin_dir,
        os_user=os_user,
        owns_base_dir=owns,
        settings=tuple((settings or {}).items()),
    )
    try:
        _run(
            server,
            [
                str(bin_dir / "initdb"),
                "-D",
                str(server.data_dir),
                "-U",
                ROLE,
                "--auth=trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
                "--no-instructions",
            ],
            what="initdb",
        )
        _pg_ctl_start(server)
        wait_until_ready(server.dsn, timeout=timeout, log_file=server.log_file)
    except BaseException:
        with contextlib.suppress(SinkError):
            stop_postgres(server)
        raise
    log.info("started PostgreSQL on %s:%d (cluster %s, OS user %s)", LOOPBACK, chosen, base, os_user or "current")
    return server


def stop_postgres(server: PostgresServer, *, timeout: float = 30.0) -> None:
    """Stop ``server`` (fast shutdown: open transactions roll back) and remove its directory if sparkonce made it.

    Raises:
        SinkError: ``pg_ctl stop`` failed while the server is still running.
    """
    try:
        if (server.data_dir / "postmaster.pid").exists():
            pg_ctl = [str(server.bin_dir / "pg_ctl"), "-D", str(server.data_dir)]
            _run(server, [*pg_ctl, "-m", "fast", "-t", f"{timeout:.0f}", "-w", "stop"], what="pg_ctl stop")
            log.info("stopped PostgreSQL on %s:%d", server.host, server.port)
    finally:
        if server.owns_base_dir:
            shutil.rmtree(server.base_dir, ignore_errors=True)


def _pg_ctl_start(server: PostgresServer) -> None:
    options = f"-p {server.port} -k {server.base_dir} -c listen_addresses={LOOPBACK} -c fsync=off"
    options += " -c max_connections=50 -c max_prepared_transactions=64"
    options += "".join(f" -c {name}={value}" for name, value in server.settings)
    pg_ctl = [str(server.bin_dir / "pg_ctl"), "-D", str(server.data_dir)]
    _run(server, [*pg_ctl, "-l", str(server.log_file), "-W", "-o", options, "start"], what="pg_ctl start")


def kill_postgres(server: PostgresServer, *, timeout: float = 30.0) -> int | None:
    """SIGKILL the server's postmaster (as a machine failure would) and wait until its processes are gone.

    Returns:
        The postmaster's pid, or None when the server was not running.
    """
    import signal

    pid_file = server.data_dir / "postmaster.pid"
    try:
        pid = int(pid_file.read_text().splitlines()[0])
    except (OSError, ValueError, IndexError):
        return None
    children = _children(pid)
    for victim in (pid, *children):
        with contextlib.suppress(ProcessLookupError):
            os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while any(Path(f"/proc/{p}").exists() and not _zombie(p) for p in (pid, *children)):
        if time.monotonic() >= deadline:
            raise SinkError(f"PostgreSQL postmaster {pid} of {server.base_dir} still runs {timeout:.0f}s after SIGKILL")
        time.sleep(0.05)  # poll until the kernel reaped them; the deadline bounds the wait
    # A killed postmaster whose parent never reaps it stays a zombie, and PostgreSQL's start refuses a data
    # directory whose postmaster.pid names a pid that still exists ("Is another postmaster running?"). It is dead:
    # drop its pid file, as an operator would after checking the process is gone.
    pid_file.unlink(missing_ok=True)
    for stale in (
        *server.base_dir.glob(f".s.PGSQL.{server.port}.lock"),
        *server.base_dir.glob(f".s.PGSQL.{server.port}"),
    ):
        stale.unlink(missing_ok=True)  # its Unix socket and socket lock file name the same dead pid
    return pid


def restart_postgres(server: PostgresServer, *, timeout: float = 60.0) -> None:
    """Start ``server`` again on its data directory and port (after :func:`kill_postgres`: crash recovery runs).

    Raises:
        SinkError: ``pg_ctl start`` failed or the server did not accept connections in time.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            _pg_ctl_start(server)
            break
        except SinkError:
            # Right after a SIGKILL the old shared memory or socket can linger for a moment: retry to the deadline.
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.2)
    wait_until_ready(server.dsn, timeout=max(1.0, deadline - time.monotonic()), log_file=server.log_file)
    log.info("restarted PostgreSQL on %s:%d (cluster %s)", server.host, server.port, server.base_dir)


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rpartition(")")[2].split()[1]) == pid:
            found.append(int(entry.name))
    return found


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    except OSError:
        return False


def wait_until_ready(dsn: str, *, timeout: float = 60.0, log_file: Path | None = None) -> None:
    """Poll ``dsn`` with connection attempts until one succeeds or ``timeout`` seconds pass.

    Raises:
        SinkError: the deadline passed (with the end of ``log_file`` when given).
    """
    import psycopg

    deadline = time.monotonic() + timeout
    last_error = "no answer"
    while True:
        try:
            with psycopg.connect(dsn, connect_timeout=2) as conn:
                conn.execute("SELECT 1")
            return
        except psycopg.OperationalError as err:
            last_error = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        if time.monotonic() >= deadline:
            tail = _tail(log_file) if log_file is not None else ""
            raise SinkError(f"PostgreSQL at {dsn} not ready after {timeout:.0f}s: {last_error}{tail}")
        time.sleep(0.1)  # between polls; the deadline bounds the wait


def _server_os_user() -> str | None:
    if os.geteuid() != 0:
        return None
    name = os.environ.get(ENV_OS_USER, "postgres")
    import pwd

    try:
        pwd.getpwnam(name)
    except KeyError as err:
        raise SinkError(
            f"running as root, and PostgreSQL refuses root: the OS user {name!r} to run it as does not exist "
            f"(install Debian's postgresql package, or set {ENV_OS_USER})"
        ) from err
    return name


def _hand_over(base: Path, os_user: str) -> None:
    """Give ``base`` to ``os_user`` and check that user can reach it (every parent must be traversable)."""
    import pwd

    entry = pwd.getpwnam(os_user)
    os.chown(base, entry.pw_uid, entry.pw_gid)
    for parent in base.parents:
        mode = parent.stat().st_mode
        if not mode & 0o001:
            raise SinkError(
                f"the PostgreSQL OS user {os_user!r} cannot reach {base}: {parent} is not traversable by others "
                "(choose a directory under /tmp, or leave base_dir unset)"
            )


def _run(server: PostgresServer, args: list[str], *, what: str) -> None:
    kwargs: dict[str, Any] = {}
    if server.os_user is not None:
        import pwd

        entry = pwd.getpwnam(server.os_user)
        kwargs.update(user=entry.pw_uid, group=entry.pw_gid, extra_groups=[])
    env = {**os.environ, "LC_ALL": "C", "PGTZ": "UTC"}
    done = subprocess.run(
        args,
        cwd=server.base_dir,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
        **kwargs,
    )
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip()[-2000:]
        raise SinkError(f"{what} failed for the PostgreSQL cluster in {server.base_dir}: {detail}")


def _tail(path: Path) -> str:
    text = log_tail(path)
    return f"\nserver log:\n{text}" if text else ""


__all__ = [
    "PostgresServer",
    "find_bin_dir",
    "free_port",
    "kill_postgres",
    "restart_postgres",
    "start_postgres",
    "stop_postgres",
    "wait_until_ready",
]
