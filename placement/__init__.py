"""Placement across GPUs: pair matrices, fleet files, the MILP planner and the plan file.

Modules, lowest first: `pair_matrix` (format orion-pair-matrix), `fleet` (the fleet file),
`plan_file` (format orion-plan, `load_plan`), `plan` (`solve`, scipy's MILP); their files are read
with the strict JSON readers of `orion_common.json_fields`. Nothing here prints; problems raise
OrionError.
"""
