"""``python -m banditsweep`` is the ``banditsweep`` command."""

from banditsweep.sweeps.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())
