"""zerojit's version (its own module, so that modules inside the package can read it without
importing the package's facade, ``zerojit/__init__``, which imports every layer)."""

__version__ = "0.1.0"
