"""The one exception type the CLI turns into a one-line message and exit status 2."""


class UsageError(ValueError):
    """Bad input from the user: the message names the problem and the fix, in one line."""
