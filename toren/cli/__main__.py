"""`python -m toren.cli`: the `toren` command."""

from toren.cli import entrypoint

__all__: list[str] = []

if __name__ == "__main__":
    entrypoint()
