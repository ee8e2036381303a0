"""The per-GPU daemon: one long-running scheduler that any program joins with `orion run`.

It owns what a shared GPU needs while programs come and go: the scheduler's shared state (an
open run whose client slots are taken and given back at any time), the gate keeper thread that
opens best-effort gates, an MPS daemon when the sharing mode needs one, and the live records in
its state folder. Programs join through :mod:`orion_daemon.joining` (the one way a client
joins: `orion run`'s and `orion colocate`'s clients alike), and the daemon finds a client that
is gone, SIGKILL included, by itself. A run asks it to write its clients' records into the run
directory (:class:`orion_daemon.records.Recordings`); a run without a daemon on its GPU starts
one on a thread of its own process (:mod:`orion_daemon.embedded`).

Layering: imports ``orion_common``, ``postprocess`` (the profile reader) and ``scheduler_core``;
``colocation`` and ``orion_cli`` import it.
"""
