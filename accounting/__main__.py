import sys

try:
    from accounting.cli.main import run
except KeyboardInterrupt:  # Ctrl-C before the CLI's own handling begins
    sys.stderr and sys.stderr.write("accounting: interrupted\n")
    sys.exit(130)

run()
