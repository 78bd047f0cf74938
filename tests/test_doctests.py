"""The usage examples in the package docstrings run and print what they say."""
import doctest

import accounting
import accounting.planning


def test_docstring_examples():
    for module in (accounting, accounting.planning):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, module.__name__
