"""Presentation: plain tables, the renderer, the answer block, views, export and DataFrames. Formatting only."""
