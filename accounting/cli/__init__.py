"""The command line: thin argument handling over the library (main(argv) -> int per subcommand)."""
