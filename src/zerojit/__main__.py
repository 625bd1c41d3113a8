"""``python -m zerojit``: the same CLI as the ``zerojit`` console script."""

from zerojit.cli import main

if __name__ == "__main__":
    main()
