"""The JVM mode of local sessions: chosen by argument or ``SPARKONCE_JVM``, bad values named."""

from __future__ import annotations

import pytest

from sparkonce.errors import OptionError
from sparkonce.spark import JVM_ENV, jvm_mode


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
