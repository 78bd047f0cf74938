"""An analysis presented: its views (tables), its JSON and CSV export, the Hugging Face
config's views. Formatting only; the plain table, the renderer and the output writer are the
ground floor's (accounting/tables/), the answer block is the CLI's (accounting/cli/summary.py)."""
