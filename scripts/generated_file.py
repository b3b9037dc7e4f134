"""The command line of the scripts that write a generated file: nothing (write it) or ``--check``."""

from __future__ import annotations

import argparse


def check_only(argv: list[str], doc: str | None) -> bool:
    """True with ``--check`` (compare, write nothing), False to write the file. ``--help`` prints ``doc`` and
    exits 0, any other argument exits 2: neither rewrites the file."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 when the file is out of date; write nothing")
    return bool(parser.parse_args(argv).check)
