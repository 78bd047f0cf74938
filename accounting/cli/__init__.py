"""The command line: thin argument handling over the library (main(argv) -> int per subcommand),
the answer block that opens each answer (summary.py) and the docs' generated tables
(generated.py). The `web` subcommand is accounting/web/command.py, dispatched by name."""
