"""`python -m accounting web`: a local web page over the CLI.

The page never computes: every answer is the CLI's own output, run in-process
(accounting.cli.main.main) on the argv the query string names (form.py), with --format
json for the data and the text format for the answer block and the tables (run.py). The
form's fields and choices are read from the subcommands' argparse parsers and the
library's registries at run time (form.py). Standard library only (http.server).
"""
