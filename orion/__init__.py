"""orion's public Python API: what a program or a cluster's driver calls, as opposed to the
`orion` command line (``orion_cli``).

Kept small on purpose: each submodule is one integration with a system users already run, and
imports that system only when used. ``orion.ray`` puts Ray actors and tasks under orion
(``pip install "orion-gpu-share[ray]"``).
"""
