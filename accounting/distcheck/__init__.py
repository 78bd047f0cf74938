"""The multi-GPU planner checked on torch.distributed (imports torch; the planner never
imports this package). fake.py: one rank of 8 to 64 on the fake backend; gloo.py: a real
group of CPU processes; compare.py: plan against measurement."""
