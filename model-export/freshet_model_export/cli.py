"""The command line: ``python -m freshet_model_export EXPORTER [options]``, EXPORTER ``minilm``
(all-MiniLM-L6-v2; ``--quantize int8`` for its int8 variant) or ``e5`` (multilingual-e5-small).

Prints the model directory on stdout. Exit status 0 on success, 1 on a failed validation, 2 on a
usage/input error (argparse's own errors included).
"""

from __future__ import annotations

import argparse

from . import e5, minilm
from .publish import run_exporter

EXPORTERS = {"minilm": minilm, "e5": e5}


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m freshet_model_export",
                                 description="Exports freshet's embedding models to ONNX and validates "
                                             "them before publishing them.",
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="exporter", required=True, metavar="EXPORTER")
    for name, module in EXPORTERS.items():
        summary = module.__doc__.split("\n\n")[0]
        p = sub.add_parser(name, help=summary.split("\n")[0], description=summary,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(p)
        p.set_defaults(run=module.run)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return run_exporter(lambda: args.run(args))
