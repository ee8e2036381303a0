// Joining a GPU's daemon from environment variables alone (no `orion run` in front).
//
// A process that a scheduler starts (a Ray actor, a Kubernetes container, a Slurm step) cannot be
// wrapped in `orion run`, but its environment can be set. When `ORION_ROLE` is set and `ORION_RUN`
// is not, the library asks the daemon of the process's GPU for a slot itself, at the process's
// first driver call, and then attaches as any client does. `orion run` only sets these variables
// and execs the program, so there is one way to join. The variables:
//
//   ORION_ROLE               hp or be (required: its presence asks for the join)
//   ORION_NAME               the client's name on its GPU (default: <program>-<pid>)
//   ORION_PROFILE            the program's kernel profile (a path the daemon can read)
//   ORION_MEMORY_LIMIT       GPU memory it may hold: bytes or a size such as 8GiB
//   ORION_MEMORY_FRACTION    (0, 1]: that fraction of the GPU's memory, when no limit is given
//                            (what Ray's fractional num_gpus means for memory)
//   ORION_MIN_UTIL, ORION_MAX_UTIL, ORION_LATENCY_TARGET_MS   as `orion run`'s options
//   ORION_HP_CONTEXT         HP only, under a --sharing mps daemon: mps or own (--hp-context)
//   ORION_STATE_DIR          where the daemons' state folders are (default as `orion up`'s)
//   ORION_PARENT             set by the library itself in a BE client's child: the client whose
//                            memory limit the child shares (the daemon checks it is an ancestor)
//   CUDA_VISIBLE_DEVICES     the GPU: one nvidia-smi index (CUDA_DEVICE_ORDER=PCI_BUS_ID is
//                            what makes CUDA number GPUs the same way) or a GPU UUID or unique
//                            UUID prefix, matched against the daemons' records; unset means GPU 0
//
// The daemon's answer is put into the environment (ORION_RUN, ORION_CLIENT, ORION_STRICT=0,
// CUDA_VISIBLE_DEVICES as the GPU's UUID, the MPS folders), before the driver initialises, so the
// driver itself sees the MPS folders; from then on the process is an ordinary lenient client. The
// answer comes with the run's decisions (shared_state.h, RunDecisions): a sealed memfd passed with
// SCM_RIGHTS, kept open by this process and named in ORION_DECISIONS (/proc/<pid>/fd/<n>), which
// the library maps read-only. A daemon may not set ORION_DECISIONS itself.
//
// Whom it trusts (docs/architecture.md, "Trust model"): the state folder and the folder above it
// must be this user's, writable by no one else and not symlinks; the process listening on the
// socket must run as this user (SO_PEERCRED); and the answer may set only the variables above,
// or it is refused whole (never LD_PRELOAD: the library already loaded is the one that runs).
//
// A join that fails (no daemon for the GPU, a second HP, no free slot, a limit over the GPU, a
// malformed variable) prints one line on stderr and ends the process with kJoinRefusedExit. Not
// running ungated instead: a process that asked for a memory limit or for priority and quietly
// got neither would break the isolation the user counted on without anyone seeing it, whereas an
// exit is seen (Ray reports the actor dead with the line in its log) and can be retried. A daemon
// that stops later is another matter: its clients run on ungated, and ask again (rejoin_daemon)
// until a daemon of their GPU answers (client_runtime.cpp, the watch thread).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace orion {

constexpr int kJoinRefusedExit = 75;  // EX_TEMPFAIL: most refusals (slots, HP) pass with time

// Whether the environment asks for a join (ORION_ROLE set, ORION_RUN not): such a process joins
// at its first driver call, never at load time (a shell in front must not take the slot, and Ray
// sets CUDA_VISIBLE_DEVICES only when the actor's task starts).
bool daemon_join_requested();

// When daemon_join_requested(): joins the daemon and sets the variables it answered with. Ends
// the process with kJoinRefusedExit when the join fails. Otherwise does nothing.
void join_daemon_from_environment();

// Whether this process joined (or is to join) from its environment (ORION_ROLE is set): only
// such a client can ask again, with the same request, when its daemon is gone.
bool joined_from_environment();

// A client whose daemon is gone (stopped, killed, restarted) asks the daemon of its GPU for a
// slot again, with the same request as its first join (a new daemon's answer names another run).
// Nothing is put into the environment (other threads of the program run meanwhile): the answer's
// variables come back in `answer`. False, with the reason in `why`, when no daemon answers or it
// refuses. Never ends the process. Called by the client's watch thread, never a launch.
bool rejoin_daemon(std::vector<std::pair<std::string, std::string>>* answer, std::string* why);

}  // namespace orion
