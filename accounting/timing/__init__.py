"""Time from measured kernels: every op of the ledger timed on a named GPU (ops.py's rules)
from aiconfigurator-core's measured tables (tables.py), a training step, a prefill and a
decode step (step.py); a plan's step is timed by planning/kernel_time.py, which sits above
this package (timing/ imports nothing of planning/; the published runs it is checked against
are accounting/published.py, above the CLI it runs). Pure Python at import: pandas and the
tables are read only when a time is asked for."""
