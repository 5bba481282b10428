"""One lifecycle for the embedded daemons (broker, object store, Spark cluster): a state directory and its record.

A :class:`Daemon` describes one kind of daemon: the files of its state directory (an info JSON, optionally a pid
file), how its record is written and read back (its codec), which processes it runs and how each is recognised
(a marker in the command line, so a recycled pid is never taken for the daemon), and the error it raises. The
services configure one and keep only what is theirs: the command line, the readiness check and the status probe.
The lifecycle is the same for all of them::

    start    refuse when the recorded daemon still runs; spawn detached (own session, output appended to its
             log); record it; wait until ready, else stop what was spawned and forget it
    stop     SIGTERM each recorded process that still runs, SIGKILL after the deadline (``forced``); forget it
    kill     SIGKILL the main process (a crash, no clean-up); keep the info file for a restart
    status   the record and whether its main process runs

Forgetting removes the pid file, and the info file too unless the daemon keeps it for a restart after a stop
(the object store keeps its ports and keys, so ``restart`` finds them).

Everything here runs on the machine that starts the daemons (CLI, test session, benchmark), never on Spark
executors.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from sparkonce.errors import SparkonceError
from sparkonce_local.services.process import alive, kill, runs, terminate

InfoT = TypeVar("InfoT")


@dataclass(frozen=True)
class DaemonProcess:
    """One process of a daemon: its pid and the markers, one of which its command line must contain."""

    pid: int
    markers: tuple[bytes, ...]

    def runs(self) -> bool:
        """True when the pid is alive and is this daemon (not a recycled pid running something else)."""
        return any(runs(self.pid, marker) for marker in self.markers)


@dataclass(frozen=True)
class DaemonStatus(Generic[InfoT]):
    """What ``sparkonce <daemon> status`` reports; each service adds what it found out from the daemon."""

    state_dir: Path
    running: bool
    """The recorded main process is alive and is this daemon."""
    reachable: bool
    """The daemon answered its service's probe."""
    info: InfoT | None


@dataclass(frozen=True)
class DaemonStopResult:
    """What stopping a one-process daemon did (``sparkonce broker stop``, ``sparkonce storage stop``)."""

    state_dir: Path
    was_running: bool
    pid: int | None
    """The recorded main pid (also when it no longer ran)."""
    forced: bool
    """True when the daemon did not exit on SIGTERM within the deadline and was killed."""


@dataclass(frozen=True)
class Stopped(Generic[InfoT]):
    """What :meth:`Daemon.stop` found and did: the record, the pids it stopped (in order) and whether it had to
    SIGKILL one of them."""

    state_dir: Path
    info: InfoT | None
    pids: list[int]
    forced: bool

    def result(self, main_pid: int | None) -> DaemonStopResult:
        """The result of a one-process daemon's stop, naming its recorded pid."""
        return DaemonStopResult(state_dir=self.state_dir, was_running=bool(self.pids), pid=main_pid, forced=self.forced)


@dataclass(frozen=True)
class Daemon(Generic[InfoT]):
    """How one kind of daemon is recorded, recognised and stopped. Runs on the driver (a local service).

    ``encode`` turns the record into the info file's JSON object (without the state directory: ``decode`` gets it
    back as its first argument); ``processes`` lists the record's processes in stop order, the main one last.
    """

    name: str
    """What the messages call it: ``broker``, ``object store``, ``cluster``."""
    info_file: str
    pid_file: str | None
    """The main pid on one line (for ``kill $(cat ...)``); None: no pid file."""
    error: type[SparkonceError]
    encode: Callable[[InfoT], dict[str, Any]]
    decode: Callable[[Path, dict[str, Any]], InfoT]
    processes: Callable[[InfoT], Sequence[DaemonProcess]]
    describe: Callable[[InfoT], str]
    """Where it serves, for messages: a bootstrap address, an endpoint, a master URL."""
    keep_info: bool = False
    """Keep the info file when the daemon is stopped (a later restart reuses it)."""
    group: bool = False
    """Signal the process group each process leads (its children, e.g. a worker's executors, go with it)."""

    # -- the record ---------------------------------------------------------------------------------------------

    def read(self, state: Path) -> InfoT | None:
        """The record in ``state``, or None when there is none.

        Raises:
            SparkonceError: (this daemon's ``error``) the info file is not valid JSON or misses a field.
        """
        raw = self.read_raw(state)
        if raw is None:
            return None
        try:
            return self.decode(state, raw)
        except (ValueError, KeyError, TypeError) as err:
            raise self.error(f"{self.name} state file {state / self.info_file} is unreadable: {err}") from err

    def read_raw(self, state: Path) -> dict[str, Any] | None:
        """The info file's JSON object, or None when there is none (for fields the record does not carry)."""
        path = state / self.info_file
        if not path.is_file():
            return None
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            raise self.error(f"{self.name} state file {path} is unreadable: {err}") from err
        if not isinstance(data, dict):
            raise self.error(f"{self.name} state file {path} is unreadable: not a JSON object")
        return data

    def write(self, state: Path, info: InfoT, *, extra: Mapping[str, Any] | None = None) -> None:
        """Record ``info`` (plus ``extra`` fields) in ``state``; the info file is readable by its owner only (it may
        hold keys)."""
        state.mkdir(parents=True, exist_ok=True)
        if self.pid_file is not None:
            (state / self.pid_file).write_text(f"{self.main(info).pid}\n")
        path = state / self.info_file
        path.write_text(json.dumps({**self.encode(info), **(extra or {})}, indent=2) + "\n")
        path.chmod(0o600)

    def forget(self, state: Path, *, keep_info: bool | None = None) -> None:
        """Remove the pid file, and the info file unless it is kept (``keep_info``, default the daemon's)."""
        names = [self.pid_file] if self.pid_file is not None else []
        if not (self.keep_info if keep_info is None else keep_info):
            names.append(self.info_file)
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                (state / name).unlink()

    # -- its processes ------------------------------------------------------------------------------------------

    def main(self, info: InfoT) -> DaemonProcess:
        return self.processes(info)[-1]

    def probe(self, state_dir: Path | str) -> tuple[Path, InfoT | None, bool]:
        """The resolved state directory, its record, and whether the record's main process runs."""
        state = Path(state_dir).resolve()
        info = self.read(state)
        return state, info, info is not None and self.main(info).runs()

    def refuse_if_running(self, state: Path) -> None:
        """Raise this daemon's ``error`` when the daemon recorded in ``state`` still runs."""
        info = self.read(state)
        if info is not None and self.main(info).runs():
            article = "an" if self.name[0] in "aeiou" else "a"
            raise self.error(
                f"{article} {self.name} already runs for {state} (pid {self.main(info).pid}, {self.describe(info)})"
            )

    @staticmethod
    def spawn(
        argv: Sequence[str], *, log_file: Path, env: Mapping[str, str] | None = None, cwd: Path | None = None
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` detached (its own session and process group), its output appended to ``log_file``."""
        with open(log_file, "ab") as out:
            return subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=dict(env) if env is not None else None,
                cwd=cwd,
            )

    def launch(
        self,
        state: Path,
        info: InfoT,
        *,
        ready: Callable[[], None],
        extra: Mapping[str, Any] | None = None,
    ) -> InfoT:
        """Record a just spawned daemon, then call ``ready`` (which raises this daemon's ``error`` when it does not
        become ready); on that error stop its processes, forget it and re-raise."""
        self.write(state, info, extra=extra)
        try:
            ready()
        except self.error:
            self.abort(state, [process.pid for process in self.processes(info)])
            raise
        return info

    def abort(self, state: Path, pids: Sequence[int], *, timeout: float = 5.0) -> None:
        """Stop the processes of a start that failed (last started first; SIGKILL after ``timeout`` seconds) and
        forget the record."""
        for pid in reversed(pids):
            if alive(pid):
                terminate(pid, timeout=timeout, group=self.group)
        self.forget(state)

    def stop(self, state_dir: Path | str, *, timeout: float, keep_info: bool | None = None) -> Stopped[InfoT]:
        """Stop every recorded process that runs (SIGTERM, SIGKILL after ``timeout`` seconds) and forget them
        (``keep_info``: keep the info file, e.g. for a restart; default the daemon's).

        A daemon that is not running is not an error: the result lists no pid.
        """
        state = Path(state_dir).resolve()
        info = self.read(state)
        pids: list[int] = []
        forced = False
        if info is not None:
            for process in self.processes(info):
                if process.runs():
                    pids.append(process.pid)
                    forced = terminate(process.pid, timeout=timeout, group=self.group) or forced
        self.forget(state, keep_info=keep_info)
        return Stopped(state_dir=state, info=info, pids=pids, forced=forced)

    def kill(self, state_dir: Path | str) -> int | None:
        """SIGKILL the main process (a crash: no clean-up), wait until it is gone, and remove the pid file; the info
        file stays for a restart.

        Returns:
            The killed pid, or None when the daemon was not running.
        """
        state, info, running = self.probe(state_dir)
        if info is None or not running:
            return None
        pid = self.main(info).pid
        kill(pid)
        self.forget(state, keep_info=True)
        return pid


__all__ = ["Daemon", "DaemonProcess", "DaemonStatus", "DaemonStopResult", "Stopped"]
