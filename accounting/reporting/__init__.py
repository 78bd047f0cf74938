"""`python -m accounting report`: the GPT-2 size comparison report and its figures.

data.py assembles the numbers from the library API, figures.py draws them (matplotlib,
imported only here), markdown.py writes the text, cli.py stages and swaps the files in.
Reached lazily from accounting.cli.main, so `import accounting` stays free of matplotlib.
"""
