"""On/off environment switches: ``ZEROJIT_LEARN``, ``ZEROJIT_RESTORE`` and
``ZEROJIT_PRIME_KERNELS``, read by one rule, so that ``ZEROJIT_LEARN=false`` turns learning off
as ``=0`` does, and a value that is neither (``=disable``, ``=-1``) is an error naming the
variable instead of silently meaning "on". A warm-up checks every switch before it starts
(:func:`check_switches`); the CLI exits 2 for a bad one, as for its other settings."""

from __future__ import annotations

import os

__all__ = ["SWITCHES", "SwitchSettingError", "check_switches", "switch"]

#: The switches, each on unless set off: what each turns off is documented where it is read
#: (zerojit.learned, zerojit.restore, zerojit.launch_priming).
SWITCHES = ("ZEROJIT_LEARN", "ZEROJIT_RESTORE", "ZEROJIT_PRIME_KERNELS")
_ON = ("1", "true", "yes", "on")
_OFF = ("0", "false", "no", "off")


class SwitchSettingError(ValueError):
    """A switch holds something other than 1/0, true/false, yes/no or on/off (the message names
    the variable and its value; invalid input: the CLI exits 2)."""


def switch(name: str, default: bool = True) -> bool:
    """Whether the switch ``name`` (an environment variable) is on: ``1``, ``true``, ``yes`` or
    ``on`` (any case, spaces around ignored) is on, ``0``, ``false``, ``no`` or ``off`` off;
    unset or blank, ``default``.

    Raises:
        SwitchSettingError: any other value.
    """
    raw = os.environ.get(name)
    value = (raw or "").strip().lower()
    if not value:
        return default
    if value in _ON:
        return True
    if value in _OFF:
        return False
    raise SwitchSettingError(f"{name}={raw!r}: use 1 or 0 (or true/false, yes/no, on/off), or leave it unset "
                             "(on)")


def check_switches() -> None:
    """Read every switch of :data:`SWITCHES` once, so that a bad one fails before a warm-up starts.

    Raises:
        SwitchSettingError: the first switch that holds a bad value.
    """
    for name in SWITCHES:
        switch(name)
