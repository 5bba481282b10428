"""The JVM mode of local sessions: chosen by argument or ``SPARKONCE_JVM``, bad values named; where the
quick-start class archives are."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkonce.class_archive import build_class_archive
from sparkonce.errors import JarsError, OptionError
from sparkonce.spark import CLASS_ARCHIVES_ENV, JVM_ENV, class_archive_file, jvm_mode, splits_cleanly


def test_argument_wins_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(JVM_ENV, "quick-start")
    assert jvm_mode("default") == "default"
    assert jvm_mode() == "quick-start"


def test_unset_is_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(JVM_ENV, raising=False)
    assert jvm_mode() == "default"


def test_bad_value_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(JVM_ENV, "fast")
    with pytest.raises(OptionError, match=r"SPARKONCE_JVM.*'fast'.*quick-start"):
        jvm_mode()


def test_class_archives_are_named_by_classpath_and_java_in_the_chosen_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(CLASS_ARCHIVES_ENV, str(tmp_path))
    plain = class_archive_file("")
    assert plain.parent == tmp_path and plain.name.startswith("quick-start-") and plain.suffix == ".jsa"
    assert class_archive_file("") == plain
    assert class_archive_file("/opt/extra.jar") not in (plain, class_archive_file("/opt/other.jar"))
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    assert class_archive_file("") != plain


def test_an_archive_path_that_java_options_would_split_is_not_built(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert splits_cleanly(tmp_path / "archives" / "quick-start-0.jsa")
    assert not splits_cleanly(Path("/home/a user/.cache/x.jsa")) and not splits_cleanly(Path("/tmp/it's/x.jsa"))
    monkeypatch.setenv(CLASS_ARCHIVES_ENV, str(tmp_path / "my archives"))
    with pytest.raises(JarsError, match=r"my archives.*whitespace, quotes or backslashes.*SPARKONCE_CLASS_ARCHIVES"):
        build_class_archive()
    assert list(tmp_path.iterdir()) == []
