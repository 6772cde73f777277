"""The ``harness`` command: argument parsing only; each subcommand lives in the module of its role."""

from __future__ import annotations

import argparse
import sys

from harness.errors import HarnessError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="harness", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    doctor = sub.add_parser("doctor", help="platform, devices, memory, versions and fitting nox sessions")
    doctor.add_argument("--json", action="store_true", help="machine-readable output")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "doctor":
            from harness.doctor import main as doctor_main

            return doctor_main(args)
    except HarnessError as error:
        print(f"harness: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 2


if __name__ == "__main__":
    sys.exit(main())
