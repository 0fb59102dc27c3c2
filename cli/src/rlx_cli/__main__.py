"""`python -m rlx_cli`: the `rlx` command (how `rlx up --detach` starts the run's process)."""

from rlx_cli.main import main

if __name__ == "__main__":
    main()
