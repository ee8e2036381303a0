// A stand-in for libcuda.so.1 used by orion's CPU tests.
//
// It exports the driver entry points the preload library and the test launcher use, records every
// call in a log file (FAKE_CUDA_LOG, one line per event, times on CLOCK_MONOTONIC) and simulates a
// GPU: one queue per stream, each run in order by an executor thread of its own (so streams run
// concurrently unless CUDA's stream rules or stream waits order them), sleeping for each kernel's
// duration and performing stream write-value operations into host memory when reached, as the
// real GPU does.
// Kernels are made by the launcher with fake_make_function(name, duration_ns) (a module function:
// cuFuncGetName knows it) or fake_make_library_kernel (a CUkernel passed as a function, as the
// CUDA runtime does for library kernels: only cuKernelGetName knows it).
#include <dlfcn.h>
#include <fcntl.h>

#include "fake_abi.h"
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace {

struct FakeFunction {
    char name[128];
    std::uint64_t duration_ns;
    bool library_kernel;
};

constexpr CUresult kInvalidHandle = 400;  // CUDA_ERROR_INVALID_HANDLE

struct FakeStream {
    int priority;
    unsigned int flags;
    bool capturing;
};

constexpr unsigned int kCaptureFlag = 0x40;  // test-only flag: the stream reports capturing
constexpr unsigned int kBrokenFlag = 0x80;   // test-only flag: asking whether it captures fails

// A CUDA graph (made by the launcher with fake_graph_create and fake_graph_add_*) and its
// executables. Nodes are kernels, empty nodes, memory-allocation nodes (only to be refused) and
// batch memory-operation nodes holding one wait-value operation, with dependencies; the
// launcher's nodes form a chain, as one captured stream makes. Instantiation fixes the graph's
// nodes in a topological order (creation order where free); launching the executable runs its
// kernels back to back, and a wait node holds the rest of the graph on the GPU until its word
// says so, as cuStreamWaitValue32 holds a stream.
constexpr int kKernelNode = 0;
constexpr int kEmptyNode = 5;
constexpr int kMemAllocNode = 10;
constexpr int kBatchMemOpNode = 12;
struct FakeGraph;
struct FakeNode {
    int type;
    FakeFunction* function;  // kernel nodes
    unsigned int grid;
    unsigned int block;
    std::uint64_t* wait_address;  // batch memory-operation nodes: the wait's word and value
    std::uint32_t wait_value;
    std::vector<FakeNode*> deps;
    FakeGraph* graph;
    std::uint64_t alloc_bytes = 0;  // memory-allocation nodes: the size and where (2: host)
    int alloc_location = 1;
};
struct FakeGraph {
    std::vector<FakeNode*> nodes;  // alive nodes, in creation order
    FakeNode* last = nullptr;      // the launcher's newest node: the next one depends on it
};
// One step of an executable, in run order: a kernel node or a wait.
struct ExecOp {
    int type;
    std::string name;
    std::uint64_t duration_ns;
    std::uint64_t* wait_address;
    std::uint32_t wait_value;
    std::vector<std::size_t> deps;      // positions of its dependencies in run order
    std::vector<FakeNode*> origins;     // the graph nodes it was made from (and updated from)
};
struct FakeExec {
    std::vector<ExecOp> ops;
};
std::mutex g_exec_mutex;
std::set<void*> g_execs;  // live executables; any other handle launches FAKE_GRAPH_NS

std::uint64_t now_ns() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ULL + ts.tv_nsec;
}

void sleep_for(std::uint64_t ns) {
    timespec ts{static_cast<time_t>(ns / 1000000000ULL), static_cast<long>(ns % 1000000000ULL)};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

// A clock the test controls: FAKE_HOLD_KERNEL=NAME makes each kernel named NAME (a launched
// graph runs as one named "graph") run on past its duration until the file FAKE_RELEASE_FILE
// exists, so a test can tell "before it ended" from "after" by the order of events alone.
void hold_until_released(const std::string& name) {
    const char* held = std::getenv("FAKE_HOLD_KERNEL");
    const char* release = std::getenv("FAKE_RELEASE_FILE");
    if (held == nullptr || release == nullptr || name != held) return;
    while (access(release, F_OK) != 0) sleep_for(1'000'000);
}

// FAKE_EVENT_CLOCK=simulated: a timing event is stamped with its stream's simulated time (the
// durations of the kernels the stream ran before it), not the host's clock, so the time between
// two events of a stream is exactly the kernels' durations between them, however late a busy
// machine woke the simulated GPU. (Events of different streams are then not comparable.)
bool simulated_event_clock() {
    const char* clock = std::getenv("FAKE_EVENT_CLOCK");
    return clock != nullptr && std::strcmp(clock, "simulated") == 0;
}

std::mutex g_log_mutex;
int g_log_fd = -1;

// Each line is formatted whole and written by one write() on an O_APPEND descriptor: a line is in
// the log entire or not at all, even when the process exits while an executor thread logs (stdio
// would flush a half-formatted line at exit), and lines of several processes never interleave.
void log_line(const std::string& text) {
    char prefix[48];
    const int length = std::snprintf(prefix, sizeof(prefix), "%d %llu ", static_cast<int>(getpid()),
                                     static_cast<unsigned long long>(now_ns()));
    std::string line(prefix, static_cast<std::size_t>(length));
    line += text;
    line += '\n';
    std::lock_guard<std::mutex> lock(g_log_mutex);
    if (g_log_fd < 0) {
        const char* path = std::getenv("FAKE_CUDA_LOG");
        if (path == nullptr) return;
        g_log_fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        if (g_log_fd < 0) return;
    }
    const ssize_t written = write(g_log_fd, line.data(), line.size());
    (void)written;  // a test reading the log finds a missing line; nothing else can be done here
}

std::string stream_text(void* stream) {
    char buffer[32];
    std::snprintf(buffer, sizeof(buffer), "%p", stream);
    return buffer;
}

// The simulated GPU: one in-order queue per stream, each run by a thread of its own, so work on
// different streams runs concurrently unless something orders it, as on a real GPU. What orders
// it is what CUDA promises:
// - the legacy default stream (handle 0 or CU_STREAM_LEGACY) waits for all earlier work of every
//   blocking stream, and a blocking stream's work waits for all earlier legacy-stream work
//   (streams created with CU_STREAM_NON_BLOCKING take no part);
// - cuStreamWaitEvent makes the stream's next work wait for what the event recorded.
// Blocking streams do not wait for each other. Synchronising the legacy stream drains the device
// (the launcher's "sync 0" waits for everything); any other stream, that stream only.
struct Op {
    // kWait: a cuStreamWaitEvent, done when its event is; kWaitValue: a cuStreamWaitValue32 with
    // CU_STREAM_WAIT_VALUE_AND, done once (*address & value) != 0 (the stream holds until then)
    // kRecord: a cuEventRecord; when reached, the event (`address`) gets the time (timing events)
    enum Kind { kKernel, kWrite, kWait, kWaitValue, kRecord } kind;
    std::string name;
    std::uint64_t duration_ns;
    std::uint64_t* address;
    std::uint64_t value;
    std::uint64_t id = 0;
    std::vector<std::uint64_t> after;  // ids of the work this op must wait for
};

constexpr unsigned int kNonBlockingFlag = 0x1;  // CU_STREAM_NON_BLOCKING

bool is_legacy_handle(void* stream) {
    return stream == nullptr || stream == reinterpret_cast<void*>(0x1);
}

class Gpu {
public:
    void submit(void* stream, Op op) {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            Lane& lane = lane_for(stream);
            op.id = ++next_id_;
            for (auto& [handle, other] : lanes_) {
                if (&other == &lane || other.last == 0) continue;
                const bool orders = lane.legacy ? other.blocking : (lane.blocking && other.legacy);
                if (orders) op.after.push_back(other.last);
            }
            op.after.insert(op.after.end(), lane.waits.begin(), lane.waits.end());
            lane.waits.clear();
            lane.last = op.id;
            ++lane.submitted;
            lane.queue.push_back(std::move(op));
        }
        changed_.notify_all();
    }

    // The record is work in the stream, as on a real GPU: it is reached (and timestamped) once
    // everything before it has run; waiting for the event waits for it.
    void record_event(void* event, void* stream) {
        {
            // The old stamp goes before the record is queued: its lane may reach it at once.
            std::lock_guard<std::mutex> lock(mutex_);
            stamps_.erase(event);
        }
        submit(stream, Op{Op::kRecord, "", 0, static_cast<std::uint64_t*>(event), 0});
        std::lock_guard<std::mutex> lock(mutex_);
        events_[event] = lane_for(stream).last;
    }

    // cuEventQuery: 0 once the GPU reached the event's latest record (or it was never recorded).
    bool event_reached(void* event) {
        std::lock_guard<std::mutex> lock(mutex_);
        const auto found = events_.find(event);
        return found == events_.end() || done_.count(found->second) != 0;
    }

    // The time the GPU reached the event, 0 if it has not.
    std::uint64_t event_time(void* event) {
        std::lock_guard<std::mutex> lock(mutex_);
        const auto found = stamps_.find(event);
        return found == stamps_.end() ? 0 : found->second;
    }

    // Like the real driver, the wait is work in the stream: later work of the stream, and work
    // that the legacy-stream rules order after it, comes after what the event recorded.
    void wait_event(void* stream, void* event) {
        std::uint64_t recorded = 0;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            const auto found = events_.find(event);
            if (found == events_.end() || found->second == 0) return;
            recorded = found->second;
            lane_for(stream).waits.push_back(recorded);
        }
        submit(stream, Op{Op::kWait, "", 0, nullptr, 0});
    }

    // Waits for `stream`'s work; the legacy stream: for all work on the device.
    void drain(void* stream) {
        std::unique_lock<std::mutex> lock(mutex_);
        if (is_legacy_handle(stream)) {
            const std::uint64_t target = next_id_;
            changed_.wait(lock, [&] { return done_.size() >= target; });
            return;
        }
        Lane& lane = lane_for(stream);
        const std::uint64_t target = lane.submitted;
        changed_.wait(lock, [&] { return lane.completed >= target; });
    }

    // cuEventSynchronize: waits until the GPU reached the event's latest record.
    void wait_event_reached(void* event) {
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [&] {
            const auto found = events_.find(event);
            return found == events_.end() || done_.count(found->second) != 0;
        });
    }

    bool idle(void* stream) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (is_legacy_handle(stream)) return done_.size() >= next_id_;
        const Lane& lane = lane_for(stream);
        return lane.completed >= lane.submitted;
    }

private:
    struct Lane {
        std::deque<Op> queue;
        std::uint64_t last = 0;  // id of the newest op submitted here
        std::uint64_t submitted = 0;
        std::uint64_t completed = 0;
        std::vector<std::uint64_t> waits;  // event waits for the next op
        bool legacy = false;
        bool blocking = true;
        std::uint64_t last_done_ns = 0;  // when its latest op finished (0: none yet)
        std::string label;  // " stream=HANDLE" in its kernels' log lines (legacy: (nil))
        std::uint64_t simulated_ns = 1;  // the durations of the kernels it ran (never 0: unset)
    };

    Lane& lane_for(void* stream) {
        void* key = is_legacy_handle(stream) ? nullptr : stream;
        auto found = lanes_.find(key);
        if (found != lanes_.end()) return found->second;
        Lane& lane = lanes_[key];
        lane.legacy = key == nullptr;
        lane.label = " stream=" + stream_text(key);
        const bool special = key == reinterpret_cast<void*>(0x2);  // per-thread default: blocking
        if (!lane.legacy && !special) {
            lane.blocking = (static_cast<FakeStream*>(key)->flags & kNonBlockingFlag) == 0;
        }
        std::thread([this, &lane] { run(lane); }).detach();
        return lane;
    }

    bool ready(const Op& op) const {
        for (const std::uint64_t id : op.after) {
            if (done_.count(id) == 0) return false;
        }
        return true;
    }

    void run(Lane& lane) {
        // FAKE_RESUME_DELAY_US: a lane idle for at least a millisecond waits this long before its
        // next op, as work arriving at a GPU another context took meanwhile waits for that
        // context to drain and switch out. (Ops that follow one another closely never wait.)
        const char* resume_text = std::getenv("FAKE_RESUME_DELAY_US");
        const std::uint64_t resume_ns =
            resume_text != nullptr ? std::strtoull(resume_text, nullptr, 10) * 1000 : 0;
        for (;;) {
            Op op;
            bool resumed = false;
            {
                std::unique_lock<std::mutex> lock(mutex_);
                changed_.wait(lock, [&] { return !lane.queue.empty() && ready(lane.queue.front()); });
                op = lane.queue.front();
                lane.queue.pop_front();
                resumed = now_ns() >= lane.last_done_ns + 1'000'000;
            }
            if (resumed && resume_ns != 0) {
                log_line("resume_delay" + lane.label);
                sleep_for(resume_ns);
            }
            if (op.kind == Op::kKernel) {
                log_line("exec_start " + op.name + lane.label);
                sleep_for(op.duration_ns);
                hold_until_released(op.name);
                lane.simulated_ns += op.duration_ns;  // only this lane's thread touches it
                log_line("exec_end " + op.name + lane.label);
            } else if (op.kind == Op::kWaitValue) {
                const auto* word = reinterpret_cast<const std::uint32_t*>(op.address);
                while ((__atomic_load_n(word, __ATOMIC_ACQUIRE) & op.value) == 0) sleep_for(20'000);
                log_line("wait_passed");
            } else if (op.kind == Op::kWrite) {
                __atomic_store_n(op.address, op.value, __ATOMIC_RELEASE);
                log_line("write " + std::to_string(op.value));
            } else if (op.kind == Op::kRecord) {
                static const bool simulated = simulated_event_clock();
                std::lock_guard<std::mutex> lock(mutex_);
                stamps_[op.address] = simulated ? lane.simulated_ns : now_ns();
            }
            {
                std::lock_guard<std::mutex> lock(mutex_);
                done_.insert(op.id);
                ++lane.completed;
                lane.last_done_ns = now_ns();
            }
            changed_.notify_all();
        }
    }

    std::mutex mutex_;
    std::condition_variable changed_;
    std::map<void*, Lane> lanes_;  // std::map: a lane never moves while its thread runs
    std::map<void*, std::uint64_t> events_;
    std::map<void*, std::uint64_t> stamps_;  // when each event's latest record was reached
    std::set<std::uint64_t> done_;
    std::uint64_t next_id_ = 0;
};

Gpu& gpu() {
    static Gpu* instance = new Gpu();
    return *instance;
}

// The graph's nodes in a topological order, creation order where the dependencies leave a choice.
std::vector<FakeNode*> run_order(const FakeGraph& graph) {
    std::vector<FakeNode*> order;
    std::set<FakeNode*> placed;
    while (order.size() < graph.nodes.size()) {
        bool progressed = false;
        for (FakeNode* node : graph.nodes) {
            if (placed.count(node) != 0) continue;
            const bool ready = std::all_of(node->deps.begin(), node->deps.end(),
                                           [&](FakeNode* dep) { return placed.count(dep) != 0; });
            if (!ready) continue;
            order.push_back(node);
            placed.insert(node);
            progressed = true;
            break;
        }
        if (!progressed) break;  // a cycle: cannot happen through the API the launcher uses
    }
    return order;
}

std::vector<ExecOp> exec_ops(const FakeGraph& graph) {
    const std::vector<FakeNode*> order = run_order(graph);
    std::vector<ExecOp> ops;
    for (FakeNode* node : order) {
        ExecOp op{node->type, "", 0, node->wait_address, node->wait_value, {}, {node}};
        if (node->type == kKernelNode) {
            op.name = node->function->name;
            op.duration_ns = node->function->duration_ns;
        }
        for (FakeNode* dep : node->deps) {
            op.deps.push_back(std::find(order.begin(), order.end(), dep) - order.begin());
        }
        ops.push_back(std::move(op));
    }
    return ops;
}

// "wait,ga,gb": the executable's steps, for the log.
std::string ops_text(const std::vector<ExecOp>& ops) {
    std::string text;
    for (const ExecOp& op : ops) {
        if (op.type != kKernelNode && op.type != kBatchMemOpNode) continue;
        if (!text.empty()) text += ",";
        text += op.type == kKernelNode ? op.name : "wait";
    }
    return text.empty() ? "-" : text;
}

// Launching an executable: consecutive kernels run as one piece of work named "graph", and each
// wait is a wait on the stream, so a graph without waits is one "graph" on the GPU. A handle that
// is no executable runs FAKE_GRAPH_NS (default 100 us).
void submit_graph(void* stream, void* exec) {
    std::vector<ExecOp> ops;
    bool known = false;
    {
        std::lock_guard<std::mutex> lock(g_exec_mutex);
        known = g_execs.count(exec) != 0;
        if (known) ops = static_cast<FakeExec*>(exec)->ops;
    }
    if (!known) {
        const char* text = std::getenv("FAKE_GRAPH_NS");
        const std::uint64_t ns = text != nullptr ? std::strtoull(text, nullptr, 10) : 100000;
        gpu().submit(stream, Op{Op::kKernel, "graph", ns, nullptr, 0});
        return;
    }
    std::uint64_t pending = 0;
    bool any = false;
    for (const ExecOp& op : ops) {
        if (op.type == kKernelNode) {
            pending += op.duration_ns;
            any = true;
        } else if (op.type == kBatchMemOpNode) {
            if (any) gpu().submit(stream, Op{Op::kKernel, "graph", pending, nullptr, 0});
            pending = 0;
            any = false;
            gpu().submit(stream, Op{Op::kWaitValue, "", 0, op.wait_address, op.wait_value});
        }
    }
    if (any || ops.empty()) gpu().submit(stream, Op{Op::kKernel, "graph", pending, nullptr, 0});
}

CUresult instantiate(const char* api, void** exec, void* graph) {
    auto* fake = static_cast<FakeGraph*>(graph);
    const char* refuse = std::getenv("FAKE_GRAPH_WAIT_REFUSED");
    for (const FakeNode* node : fake->nodes) {
        if (node->type == kBatchMemOpNode && refuse != nullptr &&
            std::strcmp(refuse, "instantiate") == 0) {
            log_line(std::string("graph_instantiate_refused ") + api);
            return 801;  // CUDA_ERROR_NOT_SUPPORTED
        }
    }
    auto* made = new FakeExec{exec_ops(*fake)};
    {
        std::lock_guard<std::mutex> lock(g_exec_mutex);
        g_execs.insert(made);
    }
    *exec = made;
    log_line(std::string("graph_instantiate ") + api + " nodes=" +
             std::to_string(fake->nodes.size()) + " ops=" + ops_text(made->ops));
    return 0;
}

CUresult record_launch(const char* api, void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                       unsigned by, unsigned bz, void* stream) {
    auto* fn = static_cast<FakeFunction*>(f);
    // FAKE_FAIL_LAUNCHES=N: the process's first N kernel launches fail (CUDA_ERROR_LAUNCH_FAILED)
    // and run nothing, as a launch the driver refuses.
    static std::atomic<long> failing{[] {
        const char* text = std::getenv("FAKE_FAIL_LAUNCHES");
        return text != nullptr ? std::strtol(text, nullptr, 10) : 0L;
    }()};
    if (failing.load() > 0 && failing.fetch_sub(1) > 0) {
        log_line(std::string("launch_failed ") + fn->name);
        return 719;
    }
    char buffer[512];
    std::snprintf(buffer, sizeof(buffer), "launch %s %s grid=%u,%u,%u block=%u,%u,%u stream=%s", api,
                  fn->name, gx, gy, gz, bx, by, bz, stream_text(stream).c_str());
    log_line(buffer);
    // A per-thread-default-stream entry point's stream 0 is the per-thread stream (0x2).
    void* lane = stream == nullptr && std::strstr(api, "_ptsz") != nullptr
                     ? reinterpret_cast<void*>(0x2)
                     : stream;
    gpu().submit(lane, Op{Op::kKernel, fn->name, fn->duration_ns, nullptr, 0});
    return 0;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) void* fake_make_function(const char* name,
                                                                std::uint64_t duration_ns) {
    auto* fn = new FakeFunction{};
    std::snprintf(fn->name, sizeof(fn->name), "%s", name);
    fn->duration_ns = duration_ns;
    return fn;
}

__attribute__((visibility("default"))) void* fake_make_library_kernel(const char* name,
                                                                      std::uint64_t duration_ns) {
    auto* fn = static_cast<FakeFunction*>(fake_make_function(name, duration_ns));
    fn->library_kernel = true;
    return fn;
}

CUresult cuInit(unsigned int) { return 0; }
CUresult cuDriverGetVersion(int* version) {
    *version = 13000;
    return 0;
}

CUresult cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned, void* stream, void**, void**) {
    return record_launch("cuLaunchKernel", f, gx, gy, gz, bx, by, bz, stream);
}
CUresult cuLaunchKernel_ptsz(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                             unsigned by, unsigned bz, unsigned, void* stream, void**, void**) {
    return record_launch("cuLaunchKernel_ptsz", f, gx, gy, gz, bx, by, bz, stream);
}
CUresult cuLaunchKernelEx(const CUlaunchConfig* c, void* f, void**, void**) {
    return record_launch("cuLaunchKernelEx", f, c->gridDimX, c->gridDimY, c->gridDimZ,
                         c->blockDimX, c->blockDimY, c->blockDimZ, c->hStream);
}
CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* c, void* f, void**, void**) {
    return record_launch("cuLaunchKernelEx_ptsz", f, c->gridDimX, c->gridDimY, c->gridDimZ,
                         c->blockDimX, c->blockDimY, c->blockDimZ, c->hStream);
}
CUresult cuLaunchCooperativeKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                   unsigned by, unsigned bz, unsigned, void* stream, void**) {
    return record_launch("cuLaunchCooperativeKernel", f, gx, gy, gz, bx, by, bz, stream);
}
CUresult cuLaunchCooperativeKernel_ptsz(void* f, unsigned gx, unsigned gy, unsigned gz,
                                        unsigned bx, unsigned by, unsigned bz, unsigned,
                                        void* stream, void**) {
    return record_launch("cuLaunchCooperativeKernel_ptsz", f, gx, gy, gz, bx, by, bz, stream);
}
CUresult cuLaunch(void* f) {
    return record_launch("cuLaunch", f, 1, 1, 1, 0, 0, 0, nullptr);
}
CUresult cuLaunchGrid(void* f, int width, int height) {
    return record_launch("cuLaunchGrid", f, width, height, 1, 0, 0, 0, nullptr);
}
CUresult cuLaunchGridAsync(void* f, int width, int height, void* stream) {
    return record_launch("cuLaunchGridAsync", f, width, height, 1, 0, 0, 0, stream);
}
struct LaunchParams {  // CUDA_LAUNCH_PARAMS
    void* function;
    unsigned int gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
    void* hStream;
    void** kernelParams;
};
CUresult cuLaunchCooperativeKernelMultiDevice(LaunchParams* list, unsigned int devices, unsigned) {
    for (unsigned int i = 0; i < devices; ++i) {
        const LaunchParams& p = list[i];
        record_launch("cuLaunchCooperativeKernelMultiDevice", p.function, p.gridDimX, p.gridDimY,
                      p.gridDimZ, p.blockDimX, p.blockDimY, p.blockDimZ, p.hStream);
    }
    return 0;
}
CUresult cuGraphLaunch(void* exec, void* stream) {
    log_line("launch cuGraphLaunch graph stream=" + stream_text(stream));
    submit_graph(stream, exec);
    return 0;
}
CUresult cuGraphLaunch_ptsz(void* exec, void* stream) {
    log_line("launch cuGraphLaunch_ptsz graph stream=" + stream_text(stream));
    submit_graph(stream == nullptr ? reinterpret_cast<void*>(0x2) : stream, exec);
    return 0;
}

__attribute__((visibility("default"))) void* fake_graph_create() { return new FakeGraph{}; }

// A module unloaded and its function handle handed out again for another kernel: the same handle
// now names a different kernel.
__attribute__((visibility("default"))) void fake_rename_function(void* function, const char* name) {
    std::snprintf(static_cast<FakeFunction*>(function)->name, sizeof(FakeFunction::name), "%s",
                  name);
}

CUresult cuModuleUnload(void*) {
    log_line("module_unload");
    return 0;
}
CUresult cuLibraryUnload(void*) {
    log_line("library_unload");
    return 0;
}
}  // extern "C"
namespace {
FakeNode* add_node(FakeGraph* graph, FakeNode node, const std::vector<FakeNode*>& deps) {
    auto* made = new FakeNode(std::move(node));  // never freed: executables remember origins
    made->deps = deps;
    made->graph = graph;
    graph->nodes.push_back(made);
    return made;
}
// A node of the launcher's chain: it depends on the node added before it.
void add_chained(void* graph, FakeNode node) {
    auto* fake = static_cast<FakeGraph*>(graph);
    std::vector<FakeNode*> deps;
    if (fake->last != nullptr) deps.push_back(fake->last);
    fake->last = add_node(fake, std::move(node), deps);
}
}  // namespace
extern "C" {

__attribute__((visibility("default"))) void fake_graph_add_kernel(void* graph, void* function,
                                                                  unsigned grid, unsigned block) {
    add_chained(graph, FakeNode{kKernelNode, static_cast<FakeFunction*>(function), grid, block,
                                nullptr, 0, {}, nullptr});
}
// A node of another type (5: empty, 10: memory allocation) in the chain.
__attribute__((visibility("default"))) void fake_graph_add_other(void* graph, int type) {
    add_chained(graph, FakeNode{type, nullptr, 0, 0, nullptr, 0, {}, nullptr});
}
// A memory-allocation node of `bytes` in the chain, on the device (or the host when `host`).
__attribute__((visibility("default"))) void fake_graph_add_alloc(void* graph, std::uint64_t bytes,
                                                                 int host) {
    FakeNode node{kMemAllocNode, nullptr, 0, 0, nullptr, 0, {}, nullptr};
    node.alloc_bytes = bytes;
    node.alloc_location = host ? 2 : 1;
    add_chained(graph, std::move(node));
}
CUresult cuGraphMemAllocNodeGetParams(void* node, MemAllocNodeParams* params) {
    const auto* fake = static_cast<FakeNode*>(node);
    if (fake->type != kMemAllocNode || params == nullptr) return 1;
    *params = MemAllocNodeParams{};
    params->poolProps.allocType = 1;
    params->poolProps.location.type = fake->alloc_location;
    params->bytesize = fake->alloc_bytes;
    params->dptr = 0x600000000000ULL + reinterpret_cast<std::uintptr_t>(node) % 0x10000000;
    return 0;
}
// Kernel node `index` (0: the first kernel node added) of a graph.
__attribute__((visibility("default"))) void* fake_graph_node(void* graph, unsigned index) {
    for (FakeNode* node : static_cast<FakeGraph*>(graph)->nodes) {
        if (node->type == kKernelNode && index-- == 0) return node;
    }
    return nullptr;
}

CUresult cuGraphGetNodes(void* graph, void** nodes, size_t* count) {
    auto* fake = static_cast<FakeGraph*>(graph);
    if (nodes != nullptr) {
        // Listed last to first: the driver promises no order, and orion must not rely on one.
        const size_t n = std::min(*count, fake->nodes.size());
        for (size_t i = 0; i < n; ++i) nodes[i] = fake->nodes[fake->nodes.size() - 1 - i];
    }
    *count = fake->nodes.size();
    return 0;
}
CUresult list_edges(void* graph, void** from, void** to, size_t* count);
// The CUDA 10.0 ABI (what cuGetProcAddress hands out for 12.0): no edge data. With
// FAKE_GRAPH_EDGE_DATA set, the graph's edges carry data (as XLA's programmatic-launch edges do)
// and this form refuses to list them (CUDA_ERROR_LOSSY_QUERY), as the driver does.
CUresult cuGraphGetEdges(void* graph, void** from, void** to, size_t* count) {
    if (std::getenv("FAKE_GRAPH_EDGE_DATA") != nullptr && from != nullptr) return 222;
    return list_edges(graph, from, to, count);
}
// The CUDA 12.3 form, exported as cuGraphGetEdges_v2: the same edges, with their data (zeroed).
CUresult cuGraphGetEdges_v2(void* graph, void** from, void** to, void* data, size_t* count) {
    const CUresult result = list_edges(graph, from, to, count);
    if (result == 0 && data != nullptr && from != nullptr) std::memset(data, 0, 8 * *count);
    return result;
}
CUresult list_edges(void* graph, void** from, void** to, size_t* count) {
    auto* fake = static_cast<FakeGraph*>(graph);
    size_t edges = 0;
    for (auto it = fake->nodes.rbegin(); it != fake->nodes.rend(); ++it) {
        for (FakeNode* dep : (*it)->deps) {
            if (from != nullptr && to != nullptr && edges < *count) {
                from[edges] = dep;
                to[edges] = *it;
            }
            ++edges;
        }
    }
    *count = edges;
    return 0;
}
CUresult cuGraphAddDependencies(void* graph, void* const* from, void* const* to, size_t count) {
    for (size_t i = 0; i < count; ++i) {
        auto* node = static_cast<FakeNode*>(to[i]);
        auto* dep = static_cast<FakeNode*>(from[i]);
        if (node->graph != graph || dep->graph != graph) return 1;  // CUDA_ERROR_INVALID_VALUE
        if (std::find(node->deps.begin(), node->deps.end(), dep) != node->deps.end()) return 1;
        node->deps.push_back(dep);
    }
    return 0;
}
struct BatchMemOpParams {  // CUstreamBatchMemOpParams' wait-value member, padded to 48 bytes
    int operation;
    unsigned long long address;
    std::uint64_t value;
    unsigned int flags;
    unsigned long long alias;
    std::uint64_t pad;
};
struct BatchMemOpNodeParams {  // CUDA_BATCH_MEM_OP_NODE_PARAMS
    void* ctx;
    unsigned int count;
    BatchMemOpParams* paramArray;
    unsigned int flags;
};
static_assert(sizeof(BatchMemOpParams) == 48, "CUstreamBatchMemOpParams is 48 bytes");
CUresult cuGraphAddBatchMemOpNode(void** node, void* graph, void* const* deps, size_t count,
                                  const BatchMemOpNodeParams* params) {
    const char* refuse = std::getenv("FAKE_GRAPH_WAIT_REFUSED");
    if (refuse != nullptr && std::strcmp(refuse, "add") == 0) return 801;  // NOT_SUPPORTED
    // Only one 32-bit wait-value with CU_STREAM_WAIT_VALUE_AND is simulated, in a context.
    if (params == nullptr || params->ctx == nullptr || params->count != 1 ||
        params->paramArray == nullptr || params->paramArray[0].operation != 1 ||
        params->paramArray[0].flags != 0x2 || params->flags != 0) {
        return 1;
    }
    auto* fake = static_cast<FakeGraph*>(graph);
    std::vector<FakeNode*> dependencies;
    for (size_t i = 0; i < count; ++i) {
        auto* dep = static_cast<FakeNode*>(deps[i]);
        if (dep->graph != fake) return 1;
        dependencies.push_back(dep);
    }
    const BatchMemOpParams& wait = params->paramArray[0];
    *node = add_node(fake,
                     FakeNode{kBatchMemOpNode, nullptr, 0, 0,
                              reinterpret_cast<std::uint64_t*>(wait.address),
                              static_cast<std::uint32_t>(wait.value), {}, nullptr},
                     dependencies);
    log_line("graph_add_wait deps=" + std::to_string(count));
    return 0;
}
// Removes a node and every edge to and from it, as the driver does; a graph holding a
// memory-allocation node refuses, as the driver's does.
CUresult cuGraphDestroyNode(void* node) {
    auto* fake = static_cast<FakeNode*>(node);
    FakeGraph* graph = fake->graph;
    if (graph == nullptr) return 1;
    for (FakeNode* other : graph->nodes) {
        if (other->type == kMemAllocNode) return 1;
    }
    graph->nodes.erase(std::find(graph->nodes.begin(), graph->nodes.end(), fake));
    for (FakeNode* other : graph->nodes) {
        other->deps.erase(std::remove(other->deps.begin(), other->deps.end(), fake),
                          other->deps.end());
    }
    if (graph->last == fake) graph->last = nullptr;
    fake->graph = nullptr;
    log_line("graph_destroy_node");
    return 0;
}
CUresult cuGraphNodeGetType(void* node, int* type) {
    *type = static_cast<FakeNode*>(node)->type;
    return 0;
}
CUresult cuGraphKernelNodeGetParams(void* node, KernelNodeParams* params) {
    const auto* fake = static_cast<FakeNode*>(node);
    if (fake->type != kKernelNode) return 1;
    *params = KernelNodeParams{};
    params->func = fake->function;
    params->gridDimX = fake->grid;
    params->gridDimY = params->gridDimZ = 1;
    params->blockDimX = fake->block;
    params->blockDimY = params->blockDimZ = 1;
    return 0;
}
CUresult cuGraphInstantiateWithFlags(void** exec, void* graph, unsigned long long) {
    return instantiate("cuGraphInstantiateWithFlags", exec, graph);
}
CUresult cuGraphInstantiateWithParams(void** exec, void* graph, void*) {
    return instantiate("cuGraphInstantiateWithParams", exec, graph);
}
// An update takes a graph of the executable's topology (node types and dependencies, in run
// order) and its nodes' parameters; any other graph is refused, as by the driver.
CUresult cuGraphExecUpdate_v2(void* exec, void* graph, void*) {
    if (g_execs.count(exec) == 0) return kInvalidHandle;
    auto* fake = static_cast<FakeExec*>(exec);
    std::vector<ExecOp> from = exec_ops(*static_cast<FakeGraph*>(graph));
    bool same = from.size() == fake->ops.size();
    for (std::size_t i = 0; same && i < from.size(); ++i) {
        same = from[i].type == fake->ops[i].type && from[i].deps == fake->ops[i].deps;
    }
    if (!same) {
        log_line("graph_exec_update_refused ops=" + ops_text(from));
        return 910;  // CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE
    }
    for (std::size_t i = 0; i < from.size(); ++i) {
        from[i].origins.insert(from[i].origins.end(), fake->ops[i].origins.begin(),
                               fake->ops[i].origins.end());
    }
    fake->ops = std::move(from);
    log_line("graph_exec_update nodes=" + std::to_string(static_cast<FakeGraph*>(graph)->nodes.size()) +
             " ops=" + ops_text(fake->ops));
    return 0;
}
}  // extern "C"
namespace {
// A node of the graph the executable was made (or updated) from; anything else is refused.
ExecOp* exec_op(void* exec, void* node) {
    if (g_execs.count(exec) == 0) return nullptr;
    for (ExecOp& op : static_cast<FakeExec*>(exec)->ops) {
        if (std::find(op.origins.begin(), op.origins.end(), node) != op.origins.end()) return &op;
    }
    return nullptr;
}
}  // namespace
extern "C" {
CUresult cuGraphExecKernelNodeSetParams_v2(void* exec, void* node, const KernelNodeParams* params) {
    ExecOp* op = exec_op(exec, node);
    if (op == nullptr || op->type != kKernelNode) return 1;  // CUDA_ERROR_INVALID_VALUE
    const auto* function = static_cast<FakeFunction*>(params->func);
    op->name = function->name;
    op->duration_ns = function->duration_ns;
    log_line(std::string("graph_exec_set_kernel ") + function->name);
    return 0;
}
CUresult cuGraphExecNodeSetParams(void* exec, void* node, void*) {
    if (exec_op(exec, node) == nullptr) return 1;
    log_line("graph_exec_set_node");
    return 0;
}
// Setters of other node kinds (one stands for all: a memset node's parameters, a node switched
// off): taken for nodes of the graph the executable was made from, logged.
CUresult cuGraphExecMemsetNodeSetParams(void* exec, void* node, const void*, void*) {
    if (exec_op(exec, node) == nullptr) return 1;
    log_line("graph_exec_set_memset");
    return 0;
}
CUresult cuGraphNodeSetEnabled(void* exec, void* node, unsigned int enabled) {
    if (exec_op(exec, node) == nullptr) return 1;
    log_line("graph_exec_set_enabled " + std::to_string(enabled));
    return 0;
}
// Cloning: every node copied with its parameters and dependencies, as the driver does; each
// clone remembers which of its nodes stands for which original, for cuGraphNodeFindInClone.
// FAKE_GRAPH_CLONE_REFUSED=1 makes the driver refuse.
std::map<std::pair<void*, void*>, void*> g_clone_nodes;  // (clone, original node) -> its node
CUresult cuGraphClone(void** clone, void* original) {
    if (std::getenv("FAKE_GRAPH_CLONE_REFUSED") != nullptr) return 801;
    auto* from = static_cast<FakeGraph*>(original);
    auto* made = new FakeGraph{};
    std::map<FakeNode*, FakeNode*> copies;
    for (FakeNode* node : from->nodes) {
        auto* copy = new FakeNode(*node);
        copy->graph = made;
        copies[node] = copy;
        made->nodes.push_back(copy);
    }
    for (FakeNode* copy : made->nodes) {
        for (FakeNode*& dep : copy->deps) dep = copies.at(dep);
    }
    for (const auto& [node, copy] : copies) g_clone_nodes[{made, node}] = copy;
    *clone = made;
    log_line("graph_clone nodes=" + std::to_string(made->nodes.size()));
    return 0;
}
CUresult cuGraphNodeFindInClone(void** node, void* original, void* clone) {
    const auto found = g_clone_nodes.find({clone, original});
    if (found == g_clone_nodes.end()) return 1;
    *node = found->second;
    return 0;
}
CUresult cuGraphDestroy(void* graph) {
    delete static_cast<FakeGraph*>(graph);  // its nodes stay: executables remember origins
    log_line("graph_destroy");
    return 0;
}
CUresult cuGraphExecDestroy(void* exec) {
    {
        std::lock_guard<std::mutex> lock(g_exec_mutex);
        if (g_execs.erase(exec) == 0) return kInvalidHandle;
    }
    delete static_cast<FakeExec*>(exec);
    log_line("graph_exec_destroy");
    return 0;
}

CUresult cuFuncGetName(const char** name, void* f) {
    const auto* fn = static_cast<FakeFunction*>(f);
    if (fn->library_kernel) return kInvalidHandle;
    *name = fn->name;
    return 0;
}
CUresult cuKernelGetName(const char** name, void* k) {
    const auto* fn = static_cast<FakeFunction*>(k);
    if (!fn->library_kernel) return kInvalidHandle;
    *name = fn->name;
    return 0;
}

CUresult cuCtxGetCurrent(void** ctx) {
    *ctx = reinterpret_cast<void*>(0x1234);
    return 0;
}
CUresult cuCtxGetStreamPriorityRange(int* least, int* greatest) {
    *least = 0;
    *greatest = -5;
    return 0;
}

CUresult cuStreamCreate(void** stream, unsigned int flags) {
    *stream = new FakeStream{0, flags, (flags & kCaptureFlag) != 0};
    log_line("stream_create priority=0 stream=" + stream_text(*stream));
    return 0;
}
CUresult cuStreamCreateWithPriority(void** stream, unsigned int flags, int priority) {
    *stream = new FakeStream{priority, flags, (flags & kCaptureFlag) != 0};
    log_line("stream_create priority=" + std::to_string(priority) +
             " stream=" + stream_text(*stream));
    return 0;
}
CUresult cuStreamSynchronize(void* stream) {
    gpu().drain(stream);
    log_line("stream_sync stream=" + stream_text(stream));
    return 0;
}
CUresult cuStreamSynchronize_ptsz(void* stream) {
    return cuStreamSynchronize(stream == nullptr ? reinterpret_cast<void*>(0x2) : stream);
}
CUresult cuStreamQuery(void* stream) { return gpu().idle(stream) ? 0 : 600; }
CUresult cuStreamQuery_ptsz(void* stream) {
    return cuStreamQuery(stream == nullptr ? reinterpret_cast<void*>(0x2) : stream);
}

CUresult cuStreamIsCapturing(void* stream, int* status) {
    const bool special = stream == nullptr || stream == reinterpret_cast<void*>(0x1) ||
                         stream == reinterpret_cast<void*>(0x2);
    if (!special && (static_cast<FakeStream*>(stream)->flags & kBrokenFlag) != 0) {
        return 901;  // CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
    }
    *status = (!special && static_cast<FakeStream*>(stream)->capturing) ? 1 : 0;
    return 0;
}

CUresult cuStreamWriteValue64(void* stream, unsigned long long address, std::uint64_t value,
                              unsigned) {
    // Logged when called (the CPU cost a client pays) and, as "write", when the GPU performs it.
    log_line("write_value value=" + std::to_string(value) + " stream=" + stream_text(stream));
    gpu().submit(stream, Op{Op::kWrite, "", 0, reinterpret_cast<std::uint64_t*>(address), value});
    return 0;
}

CUresult cuStreamWaitValue32(void* stream, unsigned long long address, std::uint32_t value,
                             unsigned flags) {
    if (std::getenv("FAKE_NO_WAIT_VALUE") != nullptr) return 1;
    if (flags != 0x2) return 1;  // only CU_STREAM_WAIT_VALUE_AND is simulated
    // FAKE_WAIT_VALUE_DELAY_US: the call takes this long before the wait is on the stream, so
    // tests can make another thread's launch land in between every time, not once in a while.
    if (const char* delay = std::getenv("FAKE_WAIT_VALUE_DELAY_US")) {
        const long us = std::atol(delay);
        timespec ts{us / 1000000, (us % 1000000) * 1000};
        nanosleep(&ts, nullptr);
    }
    log_line("wait_value value=" + std::to_string(value) + " stream=" + stream_text(stream));
    gpu().submit(stream, Op{Op::kWaitValue, "", 0, reinterpret_cast<std::uint64_t*>(address), value});
    return 0;
}

// Device memory: FAKE_MEM_TOTAL bytes (default 16 GiB), handed out as distinct fake addresses;
// an allocation past what is free fails with CUDA_ERROR_OUT_OF_MEMORY (2) like the driver's.
std::mutex g_mem_mutex;
std::map<unsigned long long, std::uint64_t> g_allocations;  // address or handle -> bytes
unsigned long long g_next_address = 0x700000000000ULL;
std::uint64_t g_mem_used = 0;

std::uint64_t mem_total() {
    const char* text = std::getenv("FAKE_MEM_TOTAL");
    return text != nullptr ? std::strtoull(text, nullptr, 10) : (16ULL << 30);
}

std::set<unsigned long long> g_host_allocations;  // of g_allocations: memory of the host

// Memory of the host (cuMemCreate or a pool located there) takes none of the device's.
CUresult fake_allocate(const char* api, unsigned long long* out, std::uint64_t bytes,
                       bool on_host = false) {
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    if (on_host) {
        *out = g_next_address;
        g_next_address += ((bytes + 0xfff) & ~0xfffULL) + 0x1000;
        g_allocations[*out] = bytes;
        g_host_allocations.insert(*out);
        log_line(std::string("alloc_host ") + api + " bytes=" + std::to_string(bytes));
        return 0;
    }
    if (g_mem_used + bytes > mem_total()) {
        log_line(std::string("alloc_failed ") + api + " bytes=" + std::to_string(bytes));
        return 2;
    }
    g_mem_used += bytes;
    *out = g_next_address;
    g_next_address += (bytes + 0xfff) & ~0xfffULL;
    g_next_address += 0x1000;
    g_allocations[*out] = bytes;
    log_line(std::string("alloc ") + api + " bytes=" + std::to_string(bytes));
    return 0;
}

CUresult fake_release(const char* api, unsigned long long address) {
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    const auto found = g_allocations.find(address);
    if (found == g_allocations.end()) return 1;  // CUDA_ERROR_INVALID_VALUE
    if (g_host_allocations.erase(address) == 0) g_mem_used -= found->second;
    log_line(std::string("free ") + api + " bytes=" + std::to_string(found->second));
    g_allocations.erase(found);
    return 0;
}

CUresult cuMemAlloc_v2(unsigned long long* p, size_t bytes) { return fake_allocate("cuMemAlloc", p, bytes); }
CUresult cuMemAllocManaged(unsigned long long* p, size_t bytes, unsigned) {
    return fake_allocate("cuMemAllocManaged", p, bytes);
}
CUresult cuMemAllocPitch_v2(unsigned long long* p, size_t* pitch, size_t width, size_t height,
                            unsigned) {
    *pitch = (width + 511) & ~size_t{511};  // rows padded to 512 bytes
    return fake_allocate("cuMemAllocPitch", p, *pitch * height);
}
// Stream-ordered pools: the default one, and those made by cuMemPoolCreate (on the device or the
// host). The stand-in keeps no freed memory in them; it logs what the program asks of them.
struct FakePool {
    bool on_host;
};
FakePool g_default_pool{false};
void* g_current_pool = &g_default_pool;
bool pool_on_host(void* pool) { return pool != nullptr && static_cast<FakePool*>(pool)->on_host; }
// An allocation in a stream being captured becomes a node of the graph: no memory now.
bool stream_capturing(void* stream) {
    const bool special = stream == nullptr || stream == reinterpret_cast<void*>(0x1) ||
                         stream == reinterpret_cast<void*>(0x2);
    return !special && static_cast<FakeStream*>(stream)->capturing;
}
CUresult pool_allocate(const char* api, unsigned long long* p, size_t bytes, void* pool,
                       void* stream) {
    if (stream_capturing(stream)) {
        std::lock_guard<std::mutex> lock(g_mem_mutex);
        *p = g_next_address;
        g_next_address += ((bytes + 0xfff) & ~0xfffULL) + 0x1000;
        log_line(std::string("alloc_captured ") + api + " bytes=" + std::to_string(bytes));
        return 0;
    }
    return fake_allocate(api, p, bytes, pool_on_host(pool));
}
CUresult cuMemAllocAsync(unsigned long long* p, size_t bytes, void* stream) {
    return pool_allocate("cuMemAllocAsync", p, bytes, g_current_pool, stream);
}
CUresult cuMemAllocAsync_ptsz(unsigned long long* p, size_t bytes, void* stream) {
    return pool_allocate("cuMemAllocAsync_ptsz", p, bytes, g_current_pool, stream);
}
CUresult cuMemAllocFromPoolAsync(unsigned long long* p, size_t bytes, void* pool, void* stream) {
    return pool_allocate("cuMemAllocFromPoolAsync", p, bytes, pool, stream);
}
CUresult cuMemAllocFromPoolAsync_ptsz(unsigned long long* p, size_t bytes, void* pool,
                                      void* stream) {
    return pool_allocate("cuMemAllocFromPoolAsync_ptsz", p, bytes, pool, stream);
}
CUresult cuMemPoolCreate(void** pool, const MemPoolProps* props) {
    if (pool == nullptr || props == nullptr) return 1;
    *pool = new FakePool{props->location.type != 1};
    log_line(std::string("pool_create location=") + (props->location.type != 1 ? "host" : "device"));
    return 0;
}
CUresult cuMemPoolDestroy(void* pool) {
    if (pool == &g_default_pool) return 1;
    if (g_current_pool == pool) g_current_pool = &g_default_pool;
    delete static_cast<FakePool*>(pool);
    log_line("pool_destroy");
    return 0;
}
CUresult cuMemPoolSetAttribute(void*, int attribute, void* value) {
    if (value == nullptr) return 1;
    log_line("pool_set_attribute attr=" + std::to_string(attribute) +
             " value=" + std::to_string(*static_cast<std::uint64_t*>(value)));
    return 0;
}
CUresult cuMemPoolTrimTo(void*, size_t keep) {
    log_line("pool_trim keep=" + std::to_string(keep));
    return 0;
}
CUresult cuDeviceGetDefaultMemPool(void** pool, int) {
    *pool = &g_default_pool;
    return 0;
}
CUresult cuDeviceGetMemPool(void** pool, int) {
    *pool = g_current_pool;
    return 0;
}
CUresult cuDeviceSetMemPool(int, void* pool) {
    g_current_pool = pool;
    return 0;
}
CUresult cuMemFree_v2(unsigned long long p) { return fake_release("cuMemFree", p); }
CUresult cuMemFreeAsync(unsigned long long p, void*) { return fake_release("cuMemFreeAsync", p); }
CUresult cuMemFreeAsync_ptsz(unsigned long long p, void*) {
    return fake_release("cuMemFreeAsync_ptsz", p);
}
CUresult cuMemCreate(unsigned long long* handle, size_t bytes, const MemAllocationProp* prop,
                     unsigned long long) {
    return fake_allocate("cuMemCreate", handle, bytes, prop != nullptr && prop->location.type != 1);
}
CUresult cuMemRelease(unsigned long long handle) { return fake_release("cuMemRelease", handle); }
// CUDA arrays: cuda.h's descriptors; an array takes the bytes of its elements (no padding here).
struct FakeArrayDescriptor {
    size_t width, height;
    int format;
    unsigned channels;
};
struct FakeArray3DDescriptor {
    size_t width, height, depth;
    int format;
    unsigned channels, flags;
};
size_t fake_element_bytes(int format) {
    if (format == 0x01 || format == 0x08) return 1;
    if (format == 0x02 || format == 0x09 || format == 0x10) return 2;
    if (format == 0x03 || format == 0x0a || format == 0x20) return 4;
    return 16;
}
size_t fake_array_bytes(size_t width, size_t height, size_t depth, int format, unsigned channels) {
    return std::max<size_t>(width, 1) * std::max<size_t>(height, 1) * std::max<size_t>(depth, 1) *
           std::max(channels, 1U) * fake_element_bytes(format);
}
CUresult cuArrayCreate_v2(unsigned long long* handle, const FakeArrayDescriptor* d) {
    return fake_allocate("cuArrayCreate", handle,
                         fake_array_bytes(d->width, d->height, 0, d->format, d->channels));
}
CUresult cuArray3DCreate_v2(unsigned long long* handle, const FakeArray3DDescriptor* d) {
    return fake_allocate("cuArray3DCreate", handle,
                         fake_array_bytes(d->width, d->height, d->depth, d->format, d->channels));
}
CUresult cuArrayDestroy(unsigned long long handle) { return fake_release("cuArrayDestroy", handle); }
CUresult cuMipmappedArrayCreate(unsigned long long* handle, const FakeArray3DDescriptor* d,
                                unsigned levels) {
    size_t bytes = 0, width = d->width, height = d->height, depth = d->depth;
    for (unsigned level = 0; level < std::max(levels, 1U); ++level) {
        bytes += fake_array_bytes(width, height, depth, d->format, d->channels);
        width = std::max<size_t>(width / 2, 1);
        height = height == 0 ? 0 : std::max<size_t>(height / 2, 1);
        depth = depth == 0 ? 0 : std::max<size_t>(depth / 2, 1);
    }
    return fake_allocate("cuMipmappedArrayCreate", handle, bytes);
}
CUresult cuMipmappedArrayDestroy(unsigned long long handle) {
    return fake_release("cuMipmappedArrayDestroy", handle);
}
CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total_bytes) {
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    *free_bytes = mem_total() - g_mem_used;
    *total_bytes = mem_total();
    return 0;
}
// NVML's memory query, answered by the stand-in too (a test reaches it with dlsym, as pynvml
// reaches libnvidia-ml): the same device memory as cuMemGetInfo.
struct FakeNvmlMemory {
    unsigned long long total, free, used;
};
struct FakeNvmlMemoryV2 {
    unsigned int version;
    unsigned long long total, reserved, free, used;
};
int nvmlDeviceGetMemoryInfo(void*, FakeNvmlMemory* memory) {
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    *memory = FakeNvmlMemory{mem_total(), mem_total() - g_mem_used, g_mem_used};
    return 0;
}
int nvmlDeviceGetMemoryInfo_v2(void*, FakeNvmlMemoryV2* memory) {
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    const unsigned long long reserved = 1 << 20;  // the driver's own, as the real one reports
    *memory = FakeNvmlMemoryV2{memory->version, mem_total(), reserved,
                               mem_total() - g_mem_used - reserved, g_mem_used};
    return 0;
}
CUresult cuDeviceTotalMem_v2(size_t* bytes, int) {
    *bytes = mem_total();
    return 0;
}
// The 32-bit ABI behind the base names (what dlsym("cuMemAlloc") finds in the real driver): a
// distinct function, so a test can tell which one a caller was handed.
CUresult cuMemAlloc(unsigned int* p, unsigned int bytes) {
    unsigned long long address = 0;
    const CUresult result = fake_allocate("cuMemAlloc_v1", &address, bytes);
    *p = static_cast<unsigned int>(address);
    return result;
}

CUresult cuMemHostRegister(void* p, size_t bytes, unsigned int flags) {
    if (std::getenv("FAKE_NO_HOST_REGISTER") != nullptr) return 1;
    log_line("host_register bytes=" + std::to_string(bytes) + " flags=" + std::to_string(flags) +
             " ptr=" + stream_text(p));
    return 0;
}
CUresult cuMemHostGetDevicePointer(unsigned long long* device, void* p, unsigned int) {
    *device = reinterpret_cast<unsigned long long>(p);
    return 0;
}

CUresult cuEventCreate(void** event, unsigned int) {
    *event = new int(0);
    return 0;
}
CUresult cuEventRecord(void* event, void* stream) {
    gpu().record_event(event, stream);
    log_line("event_record stream=" + stream_text(stream));
    return 0;
}
CUresult cuEventQuery(void* event) { return gpu().event_reached(event) ? 0 : 600; }
CUresult cuEventSynchronize(void* event) {
    gpu().wait_event_reached(event);
    log_line("event_sync");
    return 0;
}
CUresult cuEventElapsedTime(float* milliseconds, void* start, void* end) {
    const std::uint64_t from = gpu().event_time(start);
    const std::uint64_t to = gpu().event_time(end);
    if (from == 0 || to == 0) return 600;  // CUDA_ERROR_NOT_READY
    *milliseconds = static_cast<float>(static_cast<double>(to - from) / 1e6);
    log_line("event_elapsed ns=" + std::to_string(to - from));
    return 0;
}
CUresult cuEventDestroy(void* event) {
    delete static_cast<int*>(event);
    return 0;
}
CUresult cuCtxSetCurrent(void*) { return 0; }
// Limits of the context (0: stack per thread, 1: printf FIFO, 2: malloc heap), logged.
CUresult cuCtxSetLimit(int limit, size_t value) {
    log_line("ctx_limit limit=" + std::to_string(limit) + " value=" + std::to_string(value));
    return limit >= 0 && limit <= 2 ? 0 : 1;
}
// The occupancy calculator: FAKE_BLOCKS_PER_SM blocks of any kernel fit on one SM (unset: the
// driver cannot say, as for a handle it does not know).
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, void* function, int block_size,
                                                     size_t shared_bytes) {
    const char* text = std::getenv("FAKE_BLOCKS_PER_SM");
    if (text == nullptr || function == nullptr) return 1;
    *blocks = std::atoi(text);
    log_line("occupancy block=" + std::to_string(block_size) +
             " shared=" + std::to_string(shared_bytes) + " blocks=" + std::to_string(*blocks));
    return 0;
}
CUresult cuThreadExchangeStreamCaptureMode(int* mode) {
    log_line("capture_mode " + std::to_string(*mode));
    *mode = 0;  // the previous mode: global
    return 0;
}
CUresult cuKernelGetFunction(void** function, void* kernel) {
    *function = kernel;
    return 0;
}
CUresult cuStreamWaitEvent(void* stream, void* event, unsigned int) {
    gpu().wait_event(stream, event);
    log_line("stream_wait_event stream=" + stream_text(stream));
    return 0;
}

CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, std::uint64_t flags,
                             int* status);
CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, std::uint64_t flags);

}  // extern "C"

namespace {

// Like the real driver, cuGetProcAddress only hands out entry points that exist in the CUDA
// version the caller asks for: cuFuncGetName and cuKernelGetName arrived in CUDA 12.3.
struct Entry {
    const char* name;
    void* legacy;
    void* per_thread;
    int since = 0;
};

#define FAKE_PTSZ(name) {#name, reinterpret_cast<void*>(&name), reinterpret_cast<void*>(&name##_ptsz)}
#define FAKE_PLAIN(name) {#name, reinterpret_cast<void*>(&name), reinterpret_cast<void*>(&name)}
#define FAKE_SINCE(name, version) \
    {#name, reinterpret_cast<void*>(&name), reinterpret_cast<void*>(&name), version}
const Entry kEntries[] = {
    FAKE_PTSZ(cuLaunchKernel),
    FAKE_PTSZ(cuLaunchKernelEx),
    FAKE_PTSZ(cuLaunchCooperativeKernel),
    FAKE_PTSZ(cuGraphLaunch),
    FAKE_PTSZ(cuStreamSynchronize),
    FAKE_PTSZ(cuStreamQuery),
    FAKE_PLAIN(cuInit),
    FAKE_PLAIN(cuDriverGetVersion),
    FAKE_SINCE(cuFuncGetName, 12030),
    FAKE_SINCE(cuKernelGetName, 12030),
    FAKE_PLAIN(cuCtxGetCurrent),
    FAKE_PLAIN(cuCtxGetStreamPriorityRange),
    FAKE_PLAIN(cuStreamCreate),
    FAKE_PLAIN(cuStreamCreateWithPriority),
    FAKE_PLAIN(cuStreamIsCapturing),
    FAKE_PLAIN(cuStreamWriteValue64),
    FAKE_PLAIN(cuStreamWaitValue32),
    FAKE_PLAIN(cuMemHostRegister),
    FAKE_PLAIN(cuMemHostGetDevicePointer),
    FAKE_PLAIN(cuEventCreate),
    FAKE_PLAIN(cuEventRecord),
    FAKE_PLAIN(cuStreamWaitEvent),
    FAKE_PLAIN(cuEventQuery),
    FAKE_PLAIN(cuEventElapsedTime),
    FAKE_PLAIN(cuEventSynchronize),
    FAKE_PLAIN(cuEventDestroy),
    FAKE_PLAIN(cuCtxSetCurrent),
    FAKE_PLAIN(cuCtxSetLimit),
    FAKE_PLAIN(cuOccupancyMaxActiveBlocksPerMultiprocessor),
    FAKE_PLAIN(cuKernelGetFunction),
    FAKE_PLAIN(cuThreadExchangeStreamCaptureMode),
    FAKE_PLAIN(cuGraphGetNodes),
    FAKE_PLAIN(cuGraphNodeGetType),
    FAKE_PLAIN(cuGraphKernelNodeGetParams),
    FAKE_PLAIN(cuGraphGetEdges),
    FAKE_PLAIN(cuGraphAddDependencies),
    FAKE_SINCE(cuGraphAddBatchMemOpNode, 11070),
    FAKE_PLAIN(cuGraphDestroyNode),
    FAKE_PLAIN(cuGraphInstantiateWithFlags),
    FAKE_SINCE(cuGraphInstantiateWithParams, 12000),
    FAKE_PLAIN(cuGraphExecDestroy),
    FAKE_PLAIN(cuModuleUnload),
    FAKE_PLAIN(cuLaunch),
    FAKE_PLAIN(cuLaunchGrid),
    FAKE_PLAIN(cuLaunchGridAsync),
    FAKE_PLAIN(cuLaunchCooperativeKernelMultiDevice),
    FAKE_PLAIN(cuLibraryUnload),
    {"cuMemAlloc", reinterpret_cast<void*>(&cuMemAlloc_v2), reinterpret_cast<void*>(&cuMemAlloc_v2)},
    {"cuMemAllocPitch", reinterpret_cast<void*>(&cuMemAllocPitch_v2),
     reinterpret_cast<void*>(&cuMemAllocPitch_v2)},
    {"cuMemFree", reinterpret_cast<void*>(&cuMemFree_v2), reinterpret_cast<void*>(&cuMemFree_v2)},
    {"cuMemGetInfo", reinterpret_cast<void*>(&cuMemGetInfo_v2),
     reinterpret_cast<void*>(&cuMemGetInfo_v2)},
    {"cuDeviceTotalMem", reinterpret_cast<void*>(&cuDeviceTotalMem_v2),
     reinterpret_cast<void*>(&cuDeviceTotalMem_v2)},
    FAKE_PLAIN(cuMemAllocManaged),
    FAKE_PTSZ(cuMemAllocAsync),
    FAKE_PTSZ(cuMemAllocFromPoolAsync),
    FAKE_PTSZ(cuMemFreeAsync),
    FAKE_PLAIN(cuMemCreate),
    FAKE_PLAIN(cuMemPoolCreate),
    FAKE_PLAIN(cuMemPoolDestroy),
    FAKE_PLAIN(cuMemPoolSetAttribute),
    FAKE_PLAIN(cuMemPoolTrimTo),
    FAKE_PLAIN(cuDeviceGetDefaultMemPool),
    FAKE_PLAIN(cuDeviceGetMemPool),
    FAKE_PLAIN(cuDeviceSetMemPool),
    FAKE_PLAIN(cuGraphMemAllocNodeGetParams),
    FAKE_PLAIN(cuMemRelease),
    {"cuArrayCreate", reinterpret_cast<void*>(&cuArrayCreate_v2),
     reinterpret_cast<void*>(&cuArrayCreate_v2)},
    {"cuArray3DCreate", reinterpret_cast<void*>(&cuArray3DCreate_v2),
     reinterpret_cast<void*>(&cuArray3DCreate_v2)},
    FAKE_PLAIN(cuArrayDestroy),
    FAKE_PLAIN(cuMipmappedArrayCreate),
    FAKE_PLAIN(cuMipmappedArrayDestroy),
    {"cuGraphExecUpdate", reinterpret_cast<void*>(&cuGraphExecUpdate_v2),
     reinterpret_cast<void*>(&cuGraphExecUpdate_v2), 12000},
    {"cuGraphExecKernelNodeSetParams", reinterpret_cast<void*>(&cuGraphExecKernelNodeSetParams_v2),
     reinterpret_cast<void*>(&cuGraphExecKernelNodeSetParams_v2), 12000},
    FAKE_SINCE(cuGraphExecNodeSetParams, 12020),
    FAKE_PLAIN(cuGraphExecMemsetNodeSetParams),
    FAKE_PLAIN(cuGraphNodeSetEnabled),
    FAKE_PLAIN(cuGraphClone),
    FAKE_PLAIN(cuGraphNodeFindInClone),
    FAKE_PLAIN(cuGraphDestroy),
};

constexpr CUresult kNotFound = 500;
constexpr int kVersionNotSufficient = 2;

CUresult lookup(const char* symbol, void** pfn, int version, std::uint64_t flags,
                int* status = nullptr) {
    if (std::strcmp(symbol, "cuGetProcAddress") == 0) {
        // As in CUDA 12+: the 5-argument ABI for version >= 12000, the old one before.
        *pfn = version >= 12000 ? reinterpret_cast<void*>(&cuGetProcAddress_v2)
                                : reinterpret_cast<void*>(&cuGetProcAddress);
        return 0;
    }
    for (const Entry& entry : kEntries) {
        if (std::strcmp(entry.name, symbol) == 0) {
            if (version < entry.since) {
                *pfn = nullptr;
                if (status != nullptr) *status = kVersionNotSufficient;
                return kNotFound;
            }
            *pfn = (flags & 2) ? entry.per_thread : entry.legacy;
            return 0;
        }
    }
    *pfn = nullptr;
    return kNotFound;
}

}  // namespace

extern "C" CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version,
                                        std::uint64_t flags, int* status) {
    int found = 1;  // CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND unless told otherwise
    const CUresult result = lookup(symbol, pfn, version, flags, &found);
    if (status != nullptr) *status = result == 0 ? 0 : found;
    return result;
}

extern "C" CUresult cuGetProcAddress(const char* symbol, void** pfn, int version,
                                     std::uint64_t flags) {
    return lookup(symbol, pfn, version, flags);
}
