"""The ``cep`` command line: the top-level parser, one module per subcommand, the inputs and outputs they share."""

from cep.cli.command import build_parser, main
from cep.cli.inputs import input_batches, merge_time_field
from cep.cli.outputs import OutputWriter

__all__ = ["main", "build_parser", "OutputWriter", "input_batches", "merge_time_field"]
