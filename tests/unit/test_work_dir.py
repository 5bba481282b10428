"""``demo`` and ``quickstart`` wipe only work directories they created, and report a failed driver as an error."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from sparkonce.cli.main import cli
from sparkonce.errors import DriverError, OptionError
from sparkonce_local.chaos import run_driver
from sparkonce_local.demo import require_success
from sparkonce_local.quickstart import run_quickstart
from sparkonce_local.workdir import MARKER, fresh_work_dir


@pytest.fixture
def users_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "thesis.txt").write_text("years of work")
    return folder


@pytest.mark.parametrize("command", ["demo", "quickstart"])
def test_cli_refuses_a_folder_it_did_not_create(
    users_folder: Path, command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(users_folder)  # `--work-dir .` is the dangerous case
    result = CliRunner().invoke(cli, [command, "--work-dir", "."])
    assert result.exit_code == 2, result.output
    assert "option '--work-dir' = '.'" in result.output and MARKER in result.output
    assert (users_folder / "thesis.txt").read_text() == "years of work"


def test_quickstart_refuses_before_starting_anything(users_folder: Path) -> None:
    with pytest.raises(OptionError, match="not created by sparkonce"):
        run_quickstart(users_folder)
    assert sorted(p.name for p in users_folder.iterdir()) == ["thesis.txt"]


def test_fresh_work_dir_wipes_only_its_own(tmp_path: Path) -> None:
    new = fresh_work_dir(tmp_path / "a" / "b", command="demo")  # created, with parents
    assert sorted(p.name for p in new.iterdir()) == [MARKER]
    (new / "table").mkdir()
    (new / "table" / "part-0.parquet").write_bytes(b"x")
    again = fresh_work_dir(tmp_path / "a" / "b", command="demo")  # ours: wiped
    assert sorted(p.name for p in again.iterdir()) == [MARKER]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert sorted(p.name for p in fresh_work_dir(empty, command="quickstart").iterdir()) == [MARKER]
    a_file = tmp_path / "file"
    a_file.write_text("")
    with pytest.raises(OptionError, match="is a file"):
        fresh_work_dir(a_file, command="demo")


def test_failed_driver_is_an_error_of_the_tree_with_its_log() -> None:
    failed = run_driver(["-c", "import sys; sys.stderr.write('boom: no JDK'); sys.exit(3)"])
    with pytest.raises(DriverError, match=r"(?s)the restarted driver failed \(exit 3\).*boom: no JDK"):
        require_success(failed, what="the restarted driver")
    require_success(run_driver(["-c", "pass"]), what="a driver")  # exit 0: no error
