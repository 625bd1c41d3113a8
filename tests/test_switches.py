"""On/off environment switches (zerojit.switches): one spelling rule for ZEROJIT_LEARN,
ZEROJIT_RESTORE and ZEROJIT_PRIME_KERNELS, a bad value refused before a warm-up runs and by the
CLI with exit 2 (``ZEROJIT_LEARN=false`` used to keep learning: only ``0`` was off)."""

from __future__ import annotations

import pytest

from zerojit import learned
from zerojit.launch_priming import priming_disabled
from zerojit.registry import JitWarmupRegistry
from zerojit.switches import SWITCHES, SwitchSettingError, switch


@pytest.mark.parametrize("value, on", [("1", True), ("0", False), ("true", True), ("False", False), (" YES ", True),
                                       ("no", False), ("On", True), ("off", False), ("", True), ("  ", True)])
def test_each_spelling_of_on_and_off(monkeypatch, value, on):
    for name in SWITCHES:
        monkeypatch.setenv(name, value)
    assert switch("ZEROJIT_LEARN") is on and learned.enabled() is on
    assert priming_disabled() is not on


def test_an_unset_switch_takes_its_default(monkeypatch):
    monkeypatch.delenv("ZEROJIT_LEARN", raising=False)
    assert switch("ZEROJIT_LEARN") is True and switch("ZEROJIT_LEARN", default=False) is False


@pytest.mark.parametrize("name", SWITCHES)
@pytest.mark.parametrize("value", ["abc", "-1", "2", "disable", "0x0"])
def test_a_value_that_is_neither_is_refused_before_a_warm_up_runs(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    message = f"{name}={value!r}: use 1 or 0 (or true/false, yes/no, on/off), or leave it unset (on)"
    with pytest.raises(SwitchSettingError) as e:
        switch(name)
    assert str(e.value) == message
    with pytest.raises(SwitchSettingError, match=r"^" + name):
        JitWarmupRegistry().warmup(progress=False)  # (refused before it looks for a target or a kernel)


def test_the_cli_exits_2_naming_the_switch(monkeypatch):
    from typer.testing import CliRunner

    from zerojit.cli import app

    monkeypatch.setenv("ZEROJIT_RESTORE", "nope")
    result = CliRunner().invoke(app, ["run", "--requests", "1", "--no-progress"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "zerojit run: ZEROJIT_RESTORE='nope': use 1 or 0 (or true/false, yes/no, on/off), or leave it unset (on)"]
