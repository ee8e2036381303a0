// The per-run shared memory that every client process of one run maps.
//
// One POSIX shared-memory object per run, created by the controller (Python, through the
// `_native` module) with permissions 0600 and a run-unique name. It holds a header, one slot per
// client, each client's kernel table (loaded from its profile), a ring of the launches each client
// made and has not yet seen finish, the completion words the GPU itself writes when a launch
// finishes, and an optional kernel trace.
//
// Everything here is standard layout with fixed-size arrays and lock-free atomics: no pointers, no
// locks, so a client that dies at any instant (SIGKILL included) cannot leave anything held.
// The controller fills the tables and then publishes `ready` with release semantics; clients refuse
// to attach before that or when the magic, layout version or size disagree.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "probe_table.h"

namespace orion {

constexpr std::uint64_t kMagic = 0x4e55524e4f49524fULL;  // the bytes "ORIONRUN"
// 2: RunHeader::hp_completion; 3: InflightEntry::gpu_written, ClientStats::graph_gpu_writes;
// 4: per-client graph tables (RunHeader::graphs_offset, GraphEntry), graph statistics; seqlock
//    protocol for the in-flight ring and the trace; ClientSlot::low_water on its own cache line;
//    graph timelines (TimelineNode, RunHeader::timeline_offset)
// 5: GPU-side BE gates (RunHeader::be_gate, gate_offset, GateBlock), ClientStats::gate_waits,
//    Reason::kGpuGate
// 6: ClientSlot::memory (per-client memory limit and use); Policy::kQuota, RunHeader::quotas and
//    quota_window_ns, ClientSlot::quota
// 7: ClientQuota::launch_ns (measured GPU time per launch)
// 8: open runs (a daemon's: clients join and leave while it is published): RunHeader::open_slots,
//    be_mask, shutdown, daemon_heartbeat_ns; ClientState::kReserved; ClientSlot::claim_pid
// 9: online-learned profiles (RunHeader::learned_offset, LearnedBlock, LearnedEntry); launches
//    and GPU time by profile source, sampled durations (ClientStats); CUDA graphs gated inside:
//    ClientStats::graphs_gated, graph_gate_waits, graphs_ungated
// 10: RunHeader::be_graph_gate (BE graphs gated inside or admitted whole; was reserved32)
// 11: sampling holds (an HP client learned beside busy BE clients): RunHeader::
//     sampling_hold_until_ns, InflightEntry::guard_seq and the started mark of completion words
//     (kStartedMark), GateBlock::hold_passes, ClientStats::sampling_holds and held_samples,
//     Reason::kSamplingHold; RunHeader::hold_long_be (the latency controller's strictest step)
// 12: BE graphs split into segments (BeGraphGate::kSegments): ClientStats::graphs_segmented and
//     graph_segments; ClientSlot::ungated_graph_why (the first graph orion could not bound);
//     ClientStats::felt_slower (the felt slowdown's tail)
// 13: the HP's quiet spell: RunHeader::hp_quiet_ns (was reserved[0]), Reason::kHpNotQuiet,
//     GateBlock::quiet_holds
// 14: what the controller decides lives in a segment of its own that clients map read-only
//     (RunDecisions, ClientDecision): the run's settings, be_mask, shutdown, the daemon's
//     heartbeat, hold_long_be, and each client's role, memory limit and GPU-time shares, all
//     moved out of RunHeader, ClientSlot, ClientMemory and ClientQuota
// 15: RunDecisions::hp_priority_stream (was reserved[0]): the HP's legacy-stream launches move
//     to a priority stream only where priorities order work between clients (MPS)
// 16: RunDecisions::context_bytes (was reserved[0]): what the CUDA context of one process takes
//     on the run's GPU, counted in every client process's memory use (memory_ledger.h)
// 17: ClientStats::felt_slower counts 12 ratios (was 4), fine enough to bound a p99 within 20%
// 18: ClientStats::felt_alone_samples and felt_alone_slower: the felt tail of launches alone, the
//     baseline a shared tail is compared with
// 19: RunDecisions::be_gate_spacing_ns (was reserved[0]): the least BE work between two waits on
//     a BE stream's GPU-side gate, apart from the queue limit the latency loop moves
// 20: ClientStats::start_felt_samples, start_felt_ns, start_felt_expected_ns, start_felt_slower:
//     an HP's request starts timed as felt, apart from its other felt launches
// 21: ClientStats::hp_requests: every request an HP starts, timed or not (its request shape)
// 22: ClientStats::requests_timed, request_samples, request_ns, request_expected_ns,
//     request_slower, request_alone_samples, request_alone_slower, request_holds: an HP's
//     requests timed whole
// 23: ClientStats::felt, start_felt and request as one FeltTally each (same counters, start_felt
//     with a tail of its request starts alone)
constexpr std::uint32_t kLayoutVersion = 23;
constexpr std::uint32_t kMaxClients = 16;
constexpr std::uint32_t kKernelSlots = 8192;    // per client; power of two; profiles have < 2000
constexpr std::uint32_t kInflightSlots = 4096;  // per client; power of two; > any launch queue
constexpr std::uint32_t kGraphSlots = 64;       // per client; power of two; graphs in a profile
constexpr std::uint32_t kTimelineNodes = 4096;  // per client: kernel nodes of all its graphs
constexpr std::uint32_t kUnknownNames = 64;
constexpr std::uint32_t kNameBytes = 256;
constexpr std::uint32_t kClientNameBytes = 32;
constexpr std::uint32_t kLearnedSlots = 2048;  // per client; power of two; kernels and graphs learned
constexpr std::uint32_t kLearnedNodes = 8192;  // per client: kernel nodes of its learned graphs
constexpr std::uint32_t kLearnedNameBytes = 512 * 1024;  // per client: learned kernels' names
constexpr std::uint32_t kLearnSamples = 8;     // durations an entry keeps (its median's window)
constexpr std::uint32_t kLearnMinSamples = 5;  // a learned entry gates from this many samples on
constexpr std::uint32_t kFeltTails = 12;
// Felt/expected ratios whose exceedances an HP client counts (FeltTally::slower), in
// hundredths so that the launch sampler compares integers. Each step at most 1.25 times the one
// before from 1.05 to 3x: the largest ratio more than 1% of samples exceed bounds their p99
// from below within that step (`orion status`'s felt_p99).
constexpr std::uint32_t kFeltTailPercents[kFeltTails] = {105, 110, 120, 135, 150, 175,
                                                         200, 250, 300, 400, 600, 800};
constexpr std::size_t kPageBytes = 4096;

// HP work timed as the user feels it (felt launches, request starts, whole requests), against
// what the same took alone: the mean slowdown is ns / expected_ns; slower[k] counts the samples
// above ratio kFeltTailPercents[k] (the tail a p99 target is about, which a mean hardly shows);
// the samples that ran alone, apart, are the tail's baseline: what the HP scatters by without
// BE, so that a shared tail is read against it rather than against 1.0. One tally per kind of
// sample, all counted by record(), so that every tail follows the same rule.
struct FeltTally {
    std::atomic<std::uint64_t> samples;
    std::atomic<std::uint64_t> ns;
    std::atomic<std::uint64_t> expected_ns;
    std::atomic<std::uint64_t> slower[kFeltTails];
    std::atomic<std::uint64_t> alone_samples;
    std::atomic<std::uint64_t> alone_slower[kFeltTails];

    void record(std::uint64_t felt_ns, std::uint64_t expected, bool alone) noexcept {
        samples.fetch_add(1, std::memory_order_relaxed);
        ns.fetch_add(felt_ns, std::memory_order_relaxed);
        expected_ns.fetch_add(expected, std::memory_order_relaxed);
        if (alone) alone_samples.fetch_add(1, std::memory_order_relaxed);
        for (std::uint32_t k = 0; k < kFeltTails && felt_ns * 100 > expected * kFeltTailPercents[k];
             ++k) {
            slower[k].fetch_add(1, std::memory_order_relaxed);
            if (alone) alone_slower[k].fetch_add(1, std::memory_order_relaxed);
        }
    }
};

static_assert((kKernelSlots & (kKernelSlots - 1)) == 0, "kernel table size must be a power of two");
static_assert((kInflightSlots & (kInflightSlots - 1)) == 0, "ring size must be a power of two");
static_assert((kGraphSlots & (kGraphSlots - 1)) == 0, "graph table size must be a power of two");
static_assert((kLearnedSlots & (kLearnedSlots - 1)) == 0, "learned table size must be a power of two");
static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "shared atomics must be lock-free");
static_assert(std::atomic<std::uint32_t>::is_always_lock_free, "shared atomics must be lock-free");

enum class Policy : std::uint32_t {
    kPassthrough = 0,
    kPriority = 1,
    kReef = 2,
    kOrion = 3,
    kQuota = 4,  // every client a peer: GPU time granted by min/max shares (GateKeeper)
};
enum class Role : std::uint32_t { kHighPriority = 0, kBestEffort = 1 };
enum class KernelClass : std::uint8_t { kUnknown = 0, kCompute = 1, kMemory = 2 };
enum class ClientState : std::uint32_t {
    kFree = 0,        // slot unused
    kRegistered = 1,  // the controller configured it; no process attached yet
    kAttached = 2,    // a live process owns it
    kExited = 3,      // its process detached normally
    kDead = 4,        // its process died without detaching (seen by a peer or the controller)
    // An open run's slot being configured by the daemon (name, role, kernel table, limits): no
    // process reads it, and it becomes kRegistered when it is ready to be attached.
    kReserved = 5,
};
// Where a held BE launch waits (RunDecisions::be_gate).
enum class BeGate : std::uint32_t {
    kCpu = 0,  // in the launching thread, inside the launch call, until the policy admits it
    kGpu = 1,  // on the GPU: the launch returns at once, its stream waits on the client's gate word
};
// How a CUDA graph of a client gated on the GPU is held (RunDecisions::be_graph_gate).
enum class BeGraphGate : std::uint32_t {
    kInside = 0,  // wait nodes on the gate word inside the graph, one per queue limit of its work
    kWhole = 1,   // not rewritten: admitted whole behind its launch's stream wait
    kSegments = 2,  // split into segments of at most a queue limit each (graph_segments.h)
};
enum class CompletionMode : std::uint32_t {
    kNone = 0,      // nothing tracked yet
    kGpuWrite = 1,  // the GPU writes each launch's sequence number when it finishes
    kEstimate = 2,  // finish times estimated from profiled durations (no driver call per launch)
};

// One kernel identity of a client's profile: name + grid + block, hashed (see kernel_key.h).
struct KernelEntry {
    std::atomic<std::uint64_t> key;  // 0 marks an empty slot
    std::uint64_t duration_ns;
    std::uint32_t sm_needed;
    std::uint8_t kernel_class;
    std::uint8_t reserved[3];
};
static_assert(sizeof(KernelEntry) == 24);

// One CUDA graph of a client's profile, identified by its kernel nodes (GraphKeyBuilder): launched
// as a unit, it needs the SMs of its widest kernel for its measured wall time on the GPU.
struct GraphEntry {
    std::atomic<std::uint64_t> key;  // 0 marks an empty slot
    std::uint64_t duration_ns;
    std::uint32_t sm_needed;
    std::uint32_t node_count;
    std::uint8_t kernel_class;
    std::uint8_t reserved[3];
    // The graph's profiled timeline, when loaded: `timeline_count` TimelineNodes from index
    // `timeline_first` of the client's timeline pool (0 nodes: gated as a unit only).
    std::uint32_t timeline_first;
    std::uint32_t timeline_count;
    std::uint32_t reserved2;
};
static_assert(sizeof(GraphEntry) == 40);

// One kernel node of a profiled graph, placed on the graph's own clock (0 = the graph starts):
// when it is expected to run, and what it needs while it does.
struct TimelineNode {
    std::uint64_t start_ns;
    std::uint64_t end_ns;
    std::uint32_t sm_needed;
    std::uint8_t kernel_class;
    std::uint8_t known;
    std::uint8_t reserved[2];
};
static_assert(sizeof(TimelineNode) == 24);

// A kernel (or a CUDA graph) a client launched that its offline profile does not list, as the
// client learned it while running (kernel_learning.h). Only the owning client writes: it claims
// the key on first sight, writes the description, then sets `described` (release); its sampler
// thread adds durations. Readers (the controller, `orion status --save-profile`) take an entry
// once `described` is set; the sample fields are single atomics, each consistent on its own.
struct LearnedEntry {
    std::atomic<std::uint64_t> key;        // 0 marks an empty slot; a kernel key or a graph key
    std::atomic<std::uint32_t> described;  // 1 once the description below is written
    std::uint8_t graph;                    // 1: `key` is a graph's identity (GraphKeyBuilder)
    std::uint8_t reserved[3];
    std::uint32_t grid[3];
    std::uint32_t block[3];
    std::uint32_t shared_bytes;   // dynamic shared memory per block at the first launch seen
    std::uint32_t blocks_per_sm;  // the driver's occupancy calculator; 0: it could not say
    std::uint32_t sm_needed;      // kernels: from the occupancy; graphs: their widest node
    std::uint32_t node_first;     // graphs: their kernel nodes, LearnedBlock::nodes[first, +count)
    std::uint32_t node_count;
    std::atomic<std::uint32_t> sample_count;             // durations measured in all
    std::atomic<std::uint32_t> samples[kLearnSamples];   // ns; the newest kLearnSamples, a ring
    std::atomic<std::uint64_t> duration_ns;  // median of the kept samples; 0 below kLearnMinSamples
    std::atomic<std::uint64_t> launches;     // launches seen
    // Kernels: the (mangled) name, `name_length` bytes at `name_offset` of LearnedBlock::names
    // (names of templated kernels run to kilobytes); graphs: none.
    std::uint32_t name_offset;
    std::uint32_t name_length;
};
static_assert(std::is_standard_layout_v<LearnedEntry>);

// One client's learned profile. `nodes` holds, for each learned graph, the indices (into
// `entries`) of its kernel nodes' own entries, so a saved profile can list a graph node by node.
struct LearnedBlock {
    std::atomic<std::uint32_t> nodes_used;
    std::atomic<std::uint32_t> names_used;
    std::uint32_t reserved[14];
    LearnedEntry entries[kLearnedSlots];
    std::uint32_t nodes[kLearnedNodes];
    char names[kLearnedNameBytes];
};

// One tracked launch, in its owner's ring of kInflightSlots (slot = seq % kInflightSlots).
//
// Protocol (a per-entry seqlock; only the owning client writes, any process reads):
//   writer: seq = 0 (relaxed); release fence; every payload field (relaxed atomics);
//           seq = launch's sequence number (release).
//   reader: s = seq (acquire); if s is not the launch wanted, stop; read the payload (relaxed);
//           acquire fence; the read is valid only if seq still equals s.
// Once the ring wraps, the writer overwrites a slot that readers may be reading: the fences make
// the second seq read see the invalidation (0) or the new number whenever any payload field read
// saw the new write, so a torn entry is always detected. Use write_inflight / read_inflight.
struct InflightEntry {
    std::atomic<std::uint64_t> seq;
    std::atomic<std::uint64_t> key;
    std::atomic<std::uint64_t> launch_ns;
    std::atomic<std::uint64_t> expected_end_ns;
    std::atomic<std::uint64_t> duration_ns;
    std::atomic<std::uint32_t> sm_needed;
    std::atomic<std::uint8_t> kernel_class;
    std::atomic<std::uint8_t> known;
    // 1: only the GPU-written completion word (or the staleness bound) ends this launch, whatever
    // the client's completion mode; its expected end is a hint for sleeping, never a finish. Set
    // for graph launches: one graph may run for milliseconds, and nothing about its length is
    // known from the launch call.
    std::atomic<std::uint8_t> gpu_written;
    std::atomic<std::uint8_t> graph;  // 1: a graph launch; `key` is then the graph's identity
    // BE launches behind a GPU-side gate wait: the launch whose own wait guards it (itself, or
    // the one before it on its stream that put the stream's last wait); 0: none known. The GPU
    // marks that launch's completion word started (kStartedMark) when it passes the wait, so an
    // unmarked guard means this launch cannot have started (tracking.h, be_may_run).
    std::atomic<std::uint64_t> guard_seq;
    std::uint64_t reserved2;
};
static_assert(sizeof(InflightEntry) == 64);
static_assert(std::atomic<std::uint8_t>::is_always_lock_free, "shared atomics must be lock-free");

// A launch as the in-flight ring holds it (the payload of an InflightEntry).
struct InflightLaunch {
    std::uint64_t key = 0;
    std::uint64_t launch_ns = 0;
    std::uint64_t expected_end_ns = 0;
    std::uint64_t duration_ns = 0;
    std::uint32_t sm_needed = 0;
    std::uint8_t kernel_class = 0;
    bool known = false;
    bool gpu_written = false;
    bool graph = false;
    std::uint64_t guard_seq = 0;
};

inline void write_inflight(InflightEntry& entry, std::uint64_t seq, const InflightLaunch& launch) {
    entry.seq.store(0, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    entry.key.store(launch.key, std::memory_order_relaxed);
    entry.launch_ns.store(launch.launch_ns, std::memory_order_relaxed);
    entry.expected_end_ns.store(launch.expected_end_ns, std::memory_order_relaxed);
    entry.duration_ns.store(launch.duration_ns, std::memory_order_relaxed);
    entry.sm_needed.store(launch.sm_needed, std::memory_order_relaxed);
    entry.kernel_class.store(launch.kernel_class, std::memory_order_relaxed);
    entry.known.store(launch.known ? 1 : 0, std::memory_order_relaxed);
    entry.gpu_written.store(launch.gpu_written ? 1 : 0, std::memory_order_relaxed);
    entry.graph.store(launch.graph ? 1 : 0, std::memory_order_relaxed);
    entry.guard_seq.store(launch.guard_seq, std::memory_order_relaxed);
    entry.seq.store(seq, std::memory_order_release);
}

// Reads launch `seq` from its slot. Returns the sequence number the slot held: equal to `seq`
// when `out` is a consistent copy of that launch; otherwise `out` is unspecified (a larger number:
// the slot was reused, so launch `seq` is long gone; a smaller one or 0: not yet published, or
// being rewritten right now).
inline std::uint64_t read_inflight(const InflightEntry& entry, std::uint64_t seq,
                                   InflightLaunch* out) {
    const std::uint64_t first = entry.seq.load(std::memory_order_acquire);
    if (first != seq) return first;
    out->key = entry.key.load(std::memory_order_relaxed);
    out->launch_ns = entry.launch_ns.load(std::memory_order_relaxed);
    out->expected_end_ns = entry.expected_end_ns.load(std::memory_order_relaxed);
    out->duration_ns = entry.duration_ns.load(std::memory_order_relaxed);
    out->sm_needed = entry.sm_needed.load(std::memory_order_relaxed);
    out->kernel_class = entry.kernel_class.load(std::memory_order_relaxed);
    out->known = entry.known.load(std::memory_order_relaxed) != 0;
    out->gpu_written = entry.gpu_written.load(std::memory_order_relaxed) != 0;
    out->graph = entry.graph.load(std::memory_order_relaxed) != 0;
    out->guard_seq = entry.guard_seq.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    return entry.seq.load(std::memory_order_relaxed);
}

// Why a launch went ahead or waited; recorded in the trace and counted in statistics.
enum class Reason : std::uint8_t {
    kHighPriority = 0,      // HP kernels always launch at once
    kNotGated = 1,          // the policy does not gate (passthrough, priority)
    kHpIdle = 2,            // no HP kernel in flight
    kFitsBeside = 3,        // fits in the SMs HP leaves free, and the classes complement
    kQueueFull = 4,         // outstanding BE work would exceed the queue limit
    kUnknownBesideHp = 5,   // an unprofiled BE kernel never runs beside HP work
    kHpKernelUnknown = 6,   // the HP kernel in flight is unprofiled: nothing runs beside it
    kNotEnoughSms = 7,      // the BE kernel needs more SMs than HP leaves free
    kClassClash = 8,        // same class as the HP kernel (or one of them unknown)
    kHpBacklog = 9,         // more HP kernels in flight than orion inspects
    kHpBusy = 10,           // REEF: HP has work in flight
    kGpuGate = 11,          // BE launch returned at once; its stream waits on the GPU-side gate
    kSamplingHold = 12,     // an HP client is taking clean samples of its unlearned work
    kHpNotQuiet = 13,       // the HP launched within its quiet spell (RunDecisions::hp_quiet_ns)
    kCount = 14,
};

// One launch in a client's trace ring (capacity a power of two; record i in slot i % capacity).
// The same seqlock as InflightEntry: the writer claims index i with trace_head.fetch_add, stores
// seq = 0, a release fence, the fields, then seq = i + 1 (release); the controller reads seq,
// the fields, an acquire fence and seq again, and takes the record only if both reads gave i + 1.
// A record not yet published (seq < i + 1) is read on the next drain; one already overwritten by
// a later lap (seq > i + 1) or torn is counted as lost, never returned as a bogus row.
struct TraceRecord {
    std::atomic<std::uint64_t> seq;
    std::atomic<std::uint64_t> key;
    std::atomic<std::uint64_t> enqueue_ns;
    std::atomic<std::uint64_t> launch_ns;
    std::atomic<std::uint64_t> duration_ns;
    std::atomic<std::uint32_t> sm_needed;
    std::atomic<std::uint8_t> kernel_class;
    std::atomic<std::uint8_t> reason;
    std::atomic<std::uint8_t> known;
    std::uint8_t reserved;
};
static_assert(sizeof(TraceRecord) == 48);

struct ClientStats {
    std::atomic<std::uint64_t> launches;            // every kernel and graph launch seen
    std::atomic<std::uint64_t> tracked_launches;    // launches entered in the in-flight ring
    std::atomic<std::uint64_t> unknown_launches;    // kernels absent from the profile
    std::atomic<std::uint64_t> graph_launches;      // cuGraphLaunch calls
    std::atomic<std::uint64_t> blocked_launches;    // BE launches that had to wait
    std::atomic<std::uint64_t> blocked_ns;          // total time BE launches waited
    std::atomic<std::uint64_t> redirected_launches; // HP legacy-stream launches moved to a priority stream
    std::atomic<std::uint64_t> capture_launches;    // launches into a capturing stream (passed through)
    std::atomic<std::uint64_t> streams_prioritised; // streams created with the role's priority
    std::atomic<std::uint64_t> graph_gpu_writes;    // graph completions the GPU was asked to write
    std::atomic<std::uint64_t> graphs_identified;   // instantiations whose kernel nodes were read
    std::atomic<std::uint64_t> unknown_graph_launches;  // graph launches not found in the profile
    std::atomic<std::uint64_t> gate_waits;  // GPU-side gate waits put before this BE client's work
    // Where each tracked launch's figures came from, and its GPU time by that source (profiled or
    // learned durations summed at launch); unknown launches are `unknown_launches`.
    std::atomic<std::uint64_t> offline_launches;
    std::atomic<std::uint64_t> online_launches;
    std::atomic<std::uint64_t> offline_ns;
    std::atomic<std::uint64_t> online_ns;
    // Launches timed on the GPU (a pair of events around them), and for those with a duration to
    // compare with (profiled or learned alone), measured and expected GPU time: their ratio is how
    // much slower this client's work ran than alone (`orion status`'s interference).
    std::atomic<std::uint64_t> sampled_launches;
    std::atomic<std::uint64_t> sampled_ns;
    std::atomic<std::uint64_t> sampled_expected_ns;
    // Launch reasons count each launch once; wait reasons count each blocked launch once per
    // distinct reason it waited for.
    std::atomic<std::uint64_t> reasons[static_cast<int>(Reason::kCount)];
    // An HP client's sampling holds (layout 11): launches that asked BE to stand aside for a
    // clean sample of unlearned work, and samples learned from while a hold was in force.
    std::atomic<std::uint64_t> sampling_holds;
    std::atomic<std::uint64_t> held_samples;
    // CUDA graphs gated inside (graph_gating.cpp; layout 9):
    std::atomic<std::uint64_t> graphs_gated;      // instantiations given gate wait nodes
    std::atomic<std::uint64_t> graph_gate_waits;  // the wait nodes they were given
    std::atomic<std::uint64_t> graphs_ungated;    // graphs orion could not rewrite (run whole)
    // An HP client's launches timed as the user feels them (layout 11; one tally since 23): from
    // the launch call to the end of its work on the GPU, for launches that found the client's own
    // queue empty, and what the same took alone (its duration alone plus the client's measured
    // overhead alone: launching and noticing the end). Their ratio is `orion status`'s
    // `felt_slowdown`; alone as the launch sampler means it (layout 18): no BE work unfinished at
    // the call, no BE launch from kAloneQuietNs before it to its end.
    FeltTally felt;
    // BE graphs split into segments (graph_segments.h; layout 12): instantiations split, and the
    // segments they were split into.
    std::atomic<std::uint64_t> graphs_segmented;
    std::atomic<std::uint64_t> graph_segments;
    // An HP's request starts timed as felt (layout 20): its first launch after launching nothing
    // for kRequestGapNs, with its own queue empty, timed whenever the felt timer is free. That
    // launch is where a BE context left resident between requests costs the HP a switch, and an
    // eager HP's felt launches above are one in 64 of its launches, seldom a request's first.
    // Kept apart, so the figures above (what the latency loop reads) are sampled as before.
    FeltTally start_felt;
    // Every request an HP started (layout 21): its launches after launching nothing for
    // kRequestGapNs, and its first. Beside its launches and GPU time, its request shape (GPU work
    // and launches per request), which tells which context suits it under MPS.
    std::atomic<std::uint64_t> hp_requests;
    // An HP's requests timed whole (request_timer.h; layout 22): from the first launch call to
    // the end of the last kernel. requests_timed counts every one; the tally only those timed
    // once a reference existed (the median of its latest requests alone).
    std::atomic<std::uint64_t> requests_timed;
    FeltTally request;
    // Request starts that asked BE to stand aside (a sampling hold) while the timer had fewer
    // requests alone than its reference holds; within the same budget as the learning holds.
    std::atomic<std::uint64_t> request_holds;
};

// The GPU-side BE gates (be_gate kGpu), on a page of their own that BE clients register with the
// driver. Client c's gate is `gates[c].word`: bit 0 set = open, the other bits an epoch. A BE client
// puts `cuStreamWaitValue32(stream, word, 1, AND)` before its work (one wait per queue limit of
// predicted work per stream), so its program never blocks on the gate; the GPU holds the work.
//
// Protocol (no locks; any process may die at any instant):
//   HP client, on every tracked launch: publish the launch in its ring, then close every BE gate
//     (close_gate: epoch + 1, open bit cleared), then bump `hp_activity` and futex-wake the
//     keeper if it sleeps. HP never opens a gate.
//   Gate keeper (a thread of the controller, never of a gated process: a thread of the BE process
//     could itself be blocked behind the closed gate, inside any call that synchronises): reads a
//     gate word, then decides from the rings (the policy's `decide`, HP launches published before
//     the read are seen), then opens with a compare-and-swap from the word it read. A close that
//     happened in between changed the epoch, so the swap fails and the keeper decides again.
//   When the keeper stops (end of run, Ctrl-C, SIGTERM) it opens every gate; when an HP process
//   dies, the keeper finds it gone and its launches stop counting; when the keeper itself is gone
//   (no heartbeat for kKeeperStaleNs), HP launches open every gate instead of closing them.
struct alignas(64) GateWord {
    std::atomic<std::uint32_t> word;
};
struct alignas(64) GateBlock {
    std::atomic<std::uint32_t> hp_activity;      // futex word: bumped after every HP close
    std::atomic<std::uint32_t> keeper_sleeping;  // 1 while the keeper waits on hp_activity
    std::atomic<std::uint64_t> opens;            // gates the keeper opened
    std::atomic<std::uint64_t> closes;           // gates the keeper closed (HP closes not counted)
    std::atomic<std::uint64_t> wakeups;          // keeper loop iterations
    // Monotonic ns of the keeper's latest pass (at least every 5 ms); 0 when no keeper runs. HP
    // clients stop closing gates (and open them) when it is 0 or stale: with nobody left to open
    // them (a controller killed with SIGKILL), a closed gate would hold BE work forever.
    std::atomic<std::uint64_t> keeper_heartbeat_ns;
    std::atomic<std::uint64_t> hold_passes;  // keeper passes a sampling hold kept BE gates shut
    std::atomic<std::uint64_t> long_holds;   // gates kept shut on long BE work (hold_long_be)
    std::atomic<std::uint64_t> quiet_holds;  // gates kept shut in the HP's quiet spell (layout 13)
    GateWord gates[kMaxClients];
};
static_assert(sizeof(GateBlock) <= kPageBytes, "the gates must fit one registered page");

constexpr std::uint32_t kGateOpen = 1;
// A BE launch's completion word holds `seq | kStartedMark` once the GPU passed the gate wait
// right before it (written by the stream, after the wait), and `seq` once it finished.
constexpr std::uint64_t kStartedMark = 1ULL << 63;
constexpr std::uint64_t kDaemonStaleNs = 1'000'000'000;  // a daemon silent this long is gone
// How long a BE client that holds for a silent daemon (ORION_BE_WHEN_DAEMON_GONE=hold) waits at
// most before it runs ungated, unless ORION_DAEMON_GONE_HOLD_S says otherwise (up to the max);
// orion_daemon/server.py declares the same default.
constexpr double kDefaultDaemonGoneHoldS = 30.0;
constexpr double kMaxDaemonGoneHoldS = 3600.0;
constexpr std::uint64_t kKeeperStaleNs = 250'000'000;  // a keeper silent this long is gone

// Closes `gate` for a new epoch, whatever its state: the keeper's pending open (from the word it
// read before) fails.
inline void close_gate(std::atomic<std::uint32_t>& gate) {
    std::uint32_t seen = gate.load(std::memory_order_relaxed);
    while (!gate.compare_exchange_weak(seen, (seen + 2) & ~kGateOpen, std::memory_order_acq_rel,
                                       std::memory_order_relaxed)) {
    }
}

// Opens `gate` if it still holds `seen` (a closed word read before the decision to open).
inline bool open_gate_if_unchanged(std::atomic<std::uint32_t>& gate, std::uint32_t seen) {
    return gate.compare_exchange_strong(seen, seen | kGateOpen, std::memory_order_acq_rel,
                                        std::memory_order_relaxed);
}

// A client's GPU memory (memory_ledger.h), as the client reports it: written by its allocation
// hooks, and `used` reset by the controller when the client is gone (its allocations died with
// its process). Its limit is the controller's (ClientDecision::memory_limit, layout 14).
struct alignas(64) ClientMemory {
    std::atomic<std::uint64_t> used;     // bytes of the client's live allocations
    std::atomic<std::uint64_t> peak;     // the most `used` has been
    std::atomic<std::uint64_t> refused;  // allocations refused by the limit
};

// Takes up to `bytes` off `count`, never below zero: a shared memory count (ClientDecision::
// memory_account) is reset when its own client ends, while those sharing it may still give back.
inline void subtract_at_most(std::atomic<std::uint64_t>& count, std::uint64_t bytes) {
    std::uint64_t seen = count.load(std::memory_order_relaxed);
    while (!count.compare_exchange_weak(seen, seen - std::min(seen, bytes),
                                        std::memory_order_acq_rel, std::memory_order_relaxed)) {
    }
}

// A client's use of GPU time, counted by the gate keeper, which measures the time the client had
// work on the GPU. Its shares are the controller's (ClientDecision, layout 14), in parts per
// million of the run's quota window.
constexpr std::uint32_t kFullShare = 1'000'000;
struct alignas(64) ClientQuota {
    std::atomic<std::uint64_t> used_ns;  // GPU time in the last window
    std::atomic<std::uint64_t> busy_ns;  // GPU time counted since the run began
    // GPU time per finished launch, as the keeper measured it (0 until measured): what a client
    // under `quota` counts for a launch it has no profile for when it spaces its gate waits.
    std::atomic<std::uint64_t> launch_ns;
};

struct alignas(64) ClientSlot {
    std::atomic<std::uint32_t> state;
    std::uint32_t reserved0;  // was the role (layout 14: ClientDecision::role)
    std::atomic<std::int32_t> pid;
    std::atomic<std::uint32_t> completion_mode;
    char name[kClientNameBytes];
    std::uint32_t kernel_count;
    std::uint32_t graph_count;
    std::uint32_t timeline_count;  // TimelineNodes of the client's pool in use
    // Open runs: the process that asked for the slot (`orion run`, which then execs the program,
    // so usually the same pid), watched by the daemon until a process attaches.
    std::atomic<std::int32_t> claim_pid;
    // Written by the owner on every tracked launch (one cache line, read by every peer).
    alignas(64) std::atomic<std::uint64_t> next_seq;       // owner's sequence allocator
    std::atomic<std::uint64_t> published_seq;              // highest seq whose entry is written
    std::atomic<std::uint64_t> last_expected_end_ns;       // owner's estimate of its queue's end
    // Advanced by whoever reads the ring (waiting BE clients, the controller): on a line of its
    // own, so their compare-and-swaps never invalidate the owner's launch-path line above.
    alignas(64) std::atomic<std::uint64_t> low_water;      // every seq <= low_water has finished
    alignas(64) ClientStats stats;
    ClientMemory memory;
    ClientQuota quota;
    alignas(64) std::atomic<std::uint64_t> trace_head;     // trace records written so far
    std::atomic<std::uint32_t> unknown_name_count;
    std::uint32_t reserved1;
    char unknown_names[kUnknownNames][kNameBytes];
    // Why the first graph orion could not bound (gate inside or split) runs whole: written once,
    // then `ungated_graph_why_set` is 2 (1 while it is being written). Layout 12.
    std::atomic<std::uint32_t> ungated_graph_why_set;
    char ungated_graph_why[kNameBytes];
};

struct alignas(64) RunHeader {
    std::uint64_t magic;
    std::uint32_t layout_version;
    std::uint32_t header_bytes;
    std::uint64_t total_bytes;
    std::atomic<std::uint32_t> ready;
    std::uint32_t trace_capacity;  // per client, power of two; 0 = tracing off (see RunDecisions)
    std::uint64_t clients_offset;
    std::uint64_t kernels_offset;
    std::uint64_t inflight_offset;
    std::uint64_t completion_offset;  // page aligned: registered with the driver for GPU writes
    std::uint64_t completion_bytes;
    std::uint64_t trace_offset;
    std::uint64_t graphs_offset;
    std::uint64_t timeline_offset;
    std::uint64_t gate_offset;  // page aligned: the GateBlock, registered by BE clients
    std::uint64_t learned_offset;  // page aligned: a LearnedBlock per client
    // A sampling hold (layout 11): an HP client that cannot learn its kernels beside busy BE work
    // asks BE to stand aside until `sampling_hold_until_ns` (monotonic; the hold is in force
    // while now is before it): no BE gate opens, and no BE launch passes the CPU gate, meanwhile.
    // Written by the HP client: a client's report, bounded by its reader (tracking.h).
    std::atomic<std::uint64_t> sampling_hold_until_ns;
    std::uint64_t reserved[4];
};

// What the controller decides for one client (layout 14; RunDecisions).
struct alignas(64) ClientDecision {
    std::atomic<std::uint32_t> role;  // a Role
    // Shares of GPU time (jobs.json min_util / max_util), in parts per million of the run's quota
    // window: promised when the client has work, and never more (kFullShare: no cap).
    std::atomic<std::uint32_t> min_ppm;
    std::atomic<std::uint32_t> max_ppm;
    // 0: the client's memory counts against its own limit. Otherwise 1 + the slot whose limit
    // and use it shares: a BE client's child counts against its parent's (run_region.h,
    // share_memory); its own slot keeps its own use too, which goes back when it ends.
    std::atomic<std::uint32_t> memory_account;
    std::atomic<std::uint64_t> memory_limit;  // bytes its allocations may hold; 0: no limit
};

// Everything the controller (a daemon, or a closed run's controller) decides, in a segment of its
// own (layout 14; run_region.h). The controller creates it as a memfd, maps it read-write, then
// seals it (F_SEAL_FUTURE_WRITE, no shrinking or growing, no more seals): from then on nobody can
// map it writable or write to it but through the controller's own mapping. Clients get the file
// descriptor (a daemon's over its socket with SCM_RIGHTS; a closed run's through the controller's
// /proc/<pid>/fd) and map it read-only, so a client that writes where it can reach changes none
// of it: its role, limits and shares, the BE mask HP closes gates by, the daemon's heartbeat and
// shutdown word, and the run's settings are the controller's alone. What clients report (their
// launches, completions, memory use, statistics) stays in the cooperative region.
constexpr std::uint64_t kDecisionsMagic = 0x4345444e4f49524fULL;  // the bytes "ORIONDEC"
constexpr std::size_t kRunNameBytes = 64;  // a run's shared-memory name, terminator included
struct alignas(64) RunDecisions {
    std::uint64_t magic;
    std::uint32_t layout_version;
    std::uint32_t decisions_bytes;
    // The cooperative region these decisions are for: a client checks it against ORION_RUN.
    char run_name[kRunNameBytes];
    std::uint32_t policy;
    std::uint32_t sm_count;
    std::uint32_t client_count;
    std::uint32_t trace_capacity;  // per client, power of two; 0 = tracing off
    std::uint64_t queue_limit_ns;       // BE work allowed on the GPU at once (sum of durations)
    std::uint64_t unknown_duration_ns;  // duration assumed for an unprofiled kernel
    std::uint64_t stale_ns;             // a launch older than this counts as finished
    // How the HP client tracks its launches' completions: a CompletionMode, kEstimate (no
    // driver call on HP's critical path) or kGpuWrite. BE clients always ask for GPU writes.
    std::uint32_t hp_completion;
    std::uint32_t be_gate;      // a BeGate
    // 1: some client has a GPU-time share (ClientDecision) the gate keeper enforces, over a
    // sliding window of quota_window_ns. Set before the run is published.
    std::uint32_t quotas;
    // 1: an open run (a daemon's): every slot is counted (client_count = kMaxClients), clients
    // are configured after publication, and a slot is reused once its process is gone.
    std::uint32_t open_slots;
    std::uint64_t quota_window_ns;
    std::uint32_t be_graph_gate;  // a BeGraphGate (clients gated on the GPU only)
    // Bit per BE client slot: the gates an HP launch closes. Written by the controller whenever
    // a client is registered or released; read by HP on every gating launch.
    std::atomic<std::uint32_t> be_mask;
    // 1 once the daemon stops (`orion down`, SIGTERM): every client passes through from then on.
    std::atomic<std::uint32_t> shutdown;
    // 1: the daemon's latency controller is at its strictest: the keeper holds BE work longer
    // than the queue limit (a whole graph, a long kernel) while the HP client is active.
    std::atomic<std::uint32_t> hold_long_be;
    // Monotonic ns of the daemon's latest pass (about every 100 ms); 0 without a daemon. Clients of
    // an open run stop gating when it is older than kDaemonStaleNs (a daemon killed with SIGKILL).
    std::atomic<std::uint64_t> daemon_heartbeat_ns;
    // The HP's quiet spell (layout 13; 0: off): under the policies that hold BE for HP, no BE
    // work is admitted until the HP has launched nothing for this long (hp_quiet_until_ns in
    // tracking.h). Time-sliced, every gap of the HP's work BE gets into costs the HP two context
    // switches: this keeps BE out of the short gaps between one request's launches.
    std::uint64_t hp_quiet_ns;
    // 1 (layout 15): an HP client's launches on the legacy default stream move to a private
    // highest-priority stream (docs/scheduler.md, "Priorities"). Only where stream priorities
    // order work between clients, i.e. under MPS: time-sliced, the driver never runs two
    // clients' kernels at once, and the move costs an eager HP four driver calls per launch.
    // The daemon sets it again as each HP joins, by the context that HP joins in
    // (set_hp_priority_stream: `orion run --hp --hp-context`).
    std::uint32_t hp_priority_stream;
    std::uint32_t reserved32;
    // Bytes the CUDA context of one process takes on the run's GPU (layout 16; 0: unknown),
    // measured once by the controller (orion_common/context_footprint.py): each client process
    // counts it in its memory use when it attaches, since the driver gives every process a
    // context of its own (a BE client's child too), and it goes back when the process ends.
    std::uint64_t context_bytes;
    // The least BE work a BE stream lets onto the GPU between two waits on its gate (layout 19;
    // 0: one queue limit). The queue limit bounds what an HP request finds let through; at the
    // latency loop's floor it is a microsecond, and every BE kernel then pays for a wait and a
    // started mark, stream operations between its kernels. This keeps them apart.
    std::uint64_t be_gate_spacing_ns;
    std::uint64_t reserved[1];
    ClientDecision clients[kMaxClients];
};
constexpr std::uint64_t kDecisionsBytes = (sizeof(RunDecisions) + kPageBytes - 1) / kPageBytes *
                                          kPageBytes;

// The longest one sampling hold of an HP client lasts (RunHeader::sampling_hold_until_ns: a hold
// is extended by this much at a time); a word further ahead is not believed (tracking.h).
constexpr std::uint64_t kMaxSamplingHoldNs = 100'000'000;

// The longest quiet spell a run may ask for (RunDecisions::hp_quiet_ns): 1 s.
constexpr std::uint64_t kMaxHpQuietNs = 1'000'000'000;

// The most BE work a run may let through between two gate waits (be_gate_spacing_ns): 10 ms.
constexpr std::uint64_t kMaxBeGateSpacingNs = 10'000'000;

static_assert(std::is_standard_layout_v<RunHeader>);
static_assert(std::is_standard_layout_v<RunDecisions>);
static_assert(std::is_standard_layout_v<ClientSlot>);
static_assert(std::is_standard_layout_v<InflightEntry>);
static_assert(std::is_standard_layout_v<KernelEntry>);
static_assert(std::is_standard_layout_v<GraphEntry>);

// Byte offsets of each region for a given trace capacity.
struct Layout {
    std::uint64_t clients_offset;
    std::uint64_t kernels_offset;
    std::uint64_t inflight_offset;
    std::uint64_t completion_offset;
    std::uint64_t completion_bytes;
    std::uint64_t trace_offset;
    std::uint64_t graphs_offset;
    std::uint64_t timeline_offset;
    std::uint64_t gate_offset;
    std::uint64_t learned_offset;
    std::uint64_t total_bytes;
};

constexpr std::uint64_t align_up(std::uint64_t value, std::uint64_t alignment) {
    return (value + alignment - 1) / alignment * alignment;
}

constexpr Layout compute_layout(std::uint32_t trace_capacity) {
    Layout layout{};
    layout.clients_offset = align_up(sizeof(RunHeader), kPageBytes);
    layout.kernels_offset =
        align_up(layout.clients_offset + sizeof(ClientSlot) * kMaxClients, kPageBytes);
    layout.inflight_offset = align_up(
        layout.kernels_offset + sizeof(KernelEntry) * kKernelSlots * kMaxClients, kPageBytes);
    layout.completion_offset = align_up(
        layout.inflight_offset + sizeof(InflightEntry) * kInflightSlots * kMaxClients, kPageBytes);
    layout.completion_bytes =
        align_up(sizeof(std::uint64_t) * kInflightSlots * kMaxClients, kPageBytes);
    layout.trace_offset = layout.completion_offset + layout.completion_bytes;
    layout.graphs_offset = align_up(
        layout.trace_offset + sizeof(TraceRecord) * std::uint64_t{trace_capacity} * kMaxClients,
        kPageBytes);
    layout.timeline_offset =
        align_up(layout.graphs_offset + sizeof(GraphEntry) * kGraphSlots * kMaxClients, kPageBytes);
    layout.gate_offset = align_up(
        layout.timeline_offset + sizeof(TimelineNode) * kTimelineNodes * kMaxClients, kPageBytes);
    layout.learned_offset = layout.gate_offset + kPageBytes;
    layout.total_bytes = layout.learned_offset + sizeof(LearnedBlock) * kMaxClients;
    return layout;
}

// The key of a profile table's entry (KernelEntry, GraphEntry), for probe_table.h.
constexpr auto entry_key = [](auto& entry) -> auto& { return entry.key; };

// Typed access to a mapped run: its base address, where each region is, and its decisions. The
// regions' offsets are the view's own copy (RunMapping's: computed when the run was made, checked
// against the trace capacity when it was attached), never re-read from the shared header: any
// process that maps the run can write the header, and a bad offset must not send the daemon's
// gate keeper (or a client) reading out of bounds. The decisions (RunDecisions) are mapped
// read-only in every process but the controller's: a client's stores there fault.
class RunView {
public:
    RunView() = default;
    RunView(void* base, const Layout& layout, std::uint32_t trace_capacity,
            RunDecisions* decisions)
        : base_(static_cast<unsigned char*>(base)),
          layout_(layout),
          trace_capacity_(trace_capacity),
          decisions_(decisions) {}

    bool valid() const { return base_ != nullptr; }
    void* base() const { return base_; }
    RunHeader& header() const { return *reinterpret_cast<RunHeader*>(base_); }
    // The controller's decisions: writable in the controller's process only (run_region.h).
    RunDecisions& decisions() const { return *decisions_; }
    ClientDecision& decision(std::uint32_t index) const { return decisions_->clients[index]; }
    Role role(std::uint32_t index) const {
        return static_cast<Role>(decisions_->clients[index].role.load(std::memory_order_relaxed));
    }
    ClientSlot& client(std::uint32_t index) const {
        return reinterpret_cast<ClientSlot*>(base_ + layout_.clients_offset)[index];
    }
    KernelEntry* kernels(std::uint32_t index) const {
        return reinterpret_cast<KernelEntry*>(base_ + layout_.kernels_offset) +
               std::uint64_t{index} * kKernelSlots;
    }
    InflightEntry* inflight(std::uint32_t index) const {
        return reinterpret_cast<InflightEntry*>(base_ + layout_.inflight_offset) +
               std::uint64_t{index} * kInflightSlots;
    }
    std::atomic<std::uint64_t>* completion(std::uint32_t index) const {
        return reinterpret_cast<std::atomic<std::uint64_t>*>(base_ + layout_.completion_offset) +
               std::uint64_t{index} * kInflightSlots;
    }
    TraceRecord* trace(std::uint32_t index) const {
        return reinterpret_cast<TraceRecord*>(base_ + layout_.trace_offset) +
               std::uint64_t{index} * trace_capacity_;
    }

    GraphEntry* graphs(std::uint32_t index) const {
        return reinterpret_cast<GraphEntry*>(base_ + layout_.graphs_offset) +
               std::uint64_t{index} * kGraphSlots;
    }

    TimelineNode* timeline(std::uint32_t index) const {
        return reinterpret_cast<TimelineNode*>(base_ + layout_.timeline_offset) +
               std::uint64_t{index} * kTimelineNodes;
    }

    LearnedBlock& learned(std::uint32_t index) const {
        return reinterpret_cast<LearnedBlock*>(base_ + layout_.learned_offset)[index];
    }

    GateBlock& gates() const {
        return *reinterpret_cast<GateBlock*>(base_ + layout_.gate_offset);
    }

    // The profile entry of the graph `key`, or nullptr when the graph is unknown to this client.
    // (Keys are hashes already: they are their own start.)
    const GraphEntry* find_graph(std::uint32_t client_index, std::uint64_t key) const {
        return find_slot(graphs(client_index), kGraphSlots, kGraphSlots, key, key, entry_key);
    }

    // The profile entry for `key`, or nullptr when the kernel is unknown to this client.
    const KernelEntry* find_kernel(std::uint32_t client_index, std::uint64_t key) const {
        return find_slot(kernels(client_index), kKernelSlots, kKernelSlots, key, key, entry_key);
    }

    // The view's trace capacity (records per client), as trace() uses it.
    std::uint32_t trace_capacity() const { return trace_capacity_; }

private:
    unsigned char* base_ = nullptr;
    Layout layout_{};
    std::uint32_t trace_capacity_ = 0;
    RunDecisions* decisions_ = nullptr;
};

}  // namespace orion
