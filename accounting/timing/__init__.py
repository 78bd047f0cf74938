"""Time from measured kernels: every op of the ledger timed on a named GPU (ops.py's rules)
from aiconfigurator-core's measured tables (tables.py), a training step, a prefill and a
decode step (step.py), for a plan (plan.py). Pure Python at import: pandas and the tables
are read only when a time is asked for."""
