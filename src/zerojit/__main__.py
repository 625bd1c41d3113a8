"""``python -m zerojit``: the same CLI as the ``zerojit`` console script (:mod:`_zerojit_entry`:
``zerojit/__init__.py`` already made a Ctrl-C during its imports end the command in one line)."""

from _zerojit_entry import run

if __name__ == "__main__":
    run()
