"""Placement across GPUs: pair matrices, fleet files, the MILP planner and the plan file.

Modules, lowest first: `_fields` (strict JSON readers), `pair_matrix` (format
orion-pair-matrix), `fleet` (the fleet file), `plan_file` (format orion-plan, `load_plan`),
`plan` (`solve`, scipy's MILP). Nothing here prints; problems raise OrionError.
"""
