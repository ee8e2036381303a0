// Timing an HP's requests whole, as its users feel them: from the first launch call of a
// request to the end of its last kernel on the GPU, against the same of its requests alone.
//
// A request is what ClientRuntime cuts from the HP's launches: a launch call kRequestGapNs or
// more after both the call before it and the return of the program's latest wait for a stream
// starts one, unless the request timed here goes on (continues(): its work ended less than the
// gap before, for programs that wait otherwise). So a decoder that waits for each step before
// launching the next is one request however long its steps wait for the GPU (cut by calls
// alone, its steps beside BE on an H200 became requests of their own, each a tenth of a request
// alone). Launches timed one at a time (launch_sampler.h) see what one launch waited for, but an
// eager service's request is 70-80 launches and a decoder's ten graphs with host work between
// them, and on an H200 their felt slowdown missed the HP's p99 ratio by more than 20% in 9 of 28
// suite cells where the mean service time of whole requests missed in 2. So a request is timed
// end to end here.
//
// One request at a time, chosen when the timer is free at its start. A launch of the timed
// request at least kMarkSpacingNs after the last one marked re-records one event after it on
// its stream (an event record, about a microsecond, and an atomic add; other launches pay a few
// loads, those of requests not timed one). A thread of the timer's own blocks on that event
// (blocking sync: it sleeps), reads the clock as it returns, and waits, with a timeout at the
// end of the gap, for a launch marked later. The request's end is the last time read before a
// gap passes with no new launch (counted from the later of the last call and that end), or,
// where the program waited for its stream after its last launch, that wait's return: what the
// program itself felt, and the end of launches left unmarked. (A program that never waits gets
// the end of its last marked launch: early by at most the work launched in kMarkSpacingNs.)
// Nothing slow between a launch's tracking and its call to the driver (the event and the
// thread are made after the first launch marked); the thread woken once a timed request, after
// its first launch; no polling.
//
// A request is compared per launch: its time over the launches it made, against the same of its
// requests alone. Where a service's requests queue (arrivals while it serves one), the next
// request's first launch follows the last one's wait within the gap, so two or three requests
// are cut as one; on an H200 the LLM decoder's timed requests held 53-57 graphs where one holds
// 32, and read 1.7x of alone against a service 0.91-0.98x. Per launch, such a run of requests is
// the time the service took for that work, against the same alone.
//
// The reference is the median of the last kAloneRequests requests that ran alone: no BE work
// unfinished at the first call and no BE launch from LaunchSampler::kAloneQuietNs before it to
// the end, or, for an HP that joined beside BE work that never stops, a sampling hold in force
// from the first call (BE unable to run then: every unfinished BE launch waits at a gate wait)
// to the end. Until it has kAloneRequests of them the timer wants alone requests, and the HP's
// launches ask for such holds (ClientRuntime::start_sampling; the learning holds' budget bounds
// what that costs BE). Requests are alike for a service, and a median is not moved by the odd
// slow one. A request timed before the window is full is counted as timed only: `orion status`
// says the figure is unknown rather than comparing with too little.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

#include "cuda_api.h"
#include "shared_state.h"

namespace orion {

class RequestTimer {
public:
    RequestTimer() = default;
    RequestTimer(const RequestTimer&) = delete;
    RequestTimer& operator=(const RequestTimer&) = delete;

    // Delivers into `stats`; reads `view` (whether BE ran near a request), `last_call_ns` (the
    // HP's newest launch call) and `last_wait_ns` (the return of its newest wait for a stream),
    // both kept by ClientRuntime, to tell where a request ends after `gap_ns` without a launch.
    void attach(ClientStats* stats, const RunView* view,
                const std::atomic<std::uint64_t>* last_call_ns,
                const std::atomic<std::uint64_t>* last_wait_ns, std::uint64_t gap_ns) {
        stats_ = stats;
        view_ = view;
        last_call_ns_ = last_call_ns;
        last_wait_ns_ = last_wait_ns;
        gap_ns_ = gap_ns;
    }

    // At the first launch call of a request (`call_ns`; `be_idle`: no BE work unfinished then;
    // `held`: a sampling hold in force and no BE work able to run): closes the request timed
    // before it to further launches, and times this one if the timer is free. Returns whether
    // this request's launches are to be marked.
    bool start(std::uint64_t call_ns, bool be_idle, bool held);
    // Whether the reference still lacks requests alone (the HP then asks for sampling holds).
    bool wants_alone() const {
        return alone_count_.load(std::memory_order_relaxed) < kAloneRequests;
    }
    // Whether launches are being marked (the launch path's one load for requests not timed).
    bool marking() const { return marking_.load(std::memory_order_acquire); }
    // Whether a call at `call_ns`, a gap after the call before it, still belongs to the request
    // being timed: its work ended, as the timer saw it, less than the gap before. (A program
    // that waits for its stream is cut by when its wait returned, ClientRuntime's
    // hp_last_wait_ns_, with no race against this thread's wake-up.)
    bool continues(std::uint64_t call_ns) const;
    // After a launch of the timed request on `stream` went to the driver.
    // After a launch of the timed request (called at `call_ns`) went to the driver on `stream`
    // (`launched`: and the driver took it).
    void mark(CUstream stream, std::uint64_t call_ns, bool launched);

    static constexpr std::uint32_t kAloneRequests = 8;  // the reference's window
    // The least time between two marked launches of a request: an eager request of 70-80
    // launches in about a millisecond and a half pays for two event records, not 80, and wakes
    // the timer's thread twice (at 200 us, eight wakes of a blocking event wait a request: on an
    // H200 the hook's helper threads took 0.5 us of CPU per launch of a back-to-back loop,
    // benchmarks/results/nvidia-h200/launch-overhead-cpus).
    static constexpr std::uint64_t kMarkSpacingNs = 1'000'000;

private:
    enum : std::uint32_t { kIdle = 0, kStarting = 1, kOpen = 2 };
    void loop();
    // Follows the open request to its end; false if it never had a launch marked, or its event
    // could not be waited for.
    bool follow(std::uint64_t* end_ns);
    // Whether the open request, ended at `end_ns`, ran alone (the rule above).
    bool ran_alone(std::uint64_t end_ns) const;
    // `felt_ns` over `launches` launches.
    void deliver(std::uint64_t felt_ns, std::uint32_t launches, bool alone);
    // The median time per launch of the requests alone in the window; 0 until it is full.
    std::uint64_t reference_ns() const;

    ClientStats* stats_ = nullptr;
    const RunView* view_ = nullptr;
    const std::atomic<std::uint64_t>* last_call_ns_ = nullptr;
    const std::atomic<std::uint64_t>* last_wait_ns_ = nullptr;
    std::uint64_t gap_ns_ = 0;

    std::atomic<std::uint32_t> state_{kIdle};  // futex word: the thread sleeps on it until kOpen
    std::atomic<bool> marking_{false};
    std::atomic<std::uint32_t> marks_{0};  // futex word: launches marked in the open request
    std::atomic<std::uint32_t> launches_{0};  // every launch of the open request (mark() counts)
    std::atomic<std::uint64_t> end_ns_{0};  // when the thread saw the latest of them finish
    std::atomic<std::uint64_t> marked_call_ns_{0};  // the call of the latest launch marked
    std::uint64_t call_ns_ = 0;            // the open request's first call
    bool be_idle_ = false;
    bool held_ = false;
    // The event and the thread, made at the first mark (set_up); false if the event could not be.
    bool set_up();
    CUevent event_ = nullptr;  // the timed request's latest marked launch, re-recorded by each
    std::atomic<bool> event_failed_{false};
    CUcontext context_ = nullptr;
    std::once_flag set_up_once_;

    // The timer thread's own: time per launch of the latest requests alone (a ring).
    std::uint64_t alone_ns_[kAloneRequests] = {};
    std::uint32_t alone_next_ = 0;                // where the next one goes
    std::atomic<std::uint32_t> alone_count_{0};  // how many it holds; written by the thread only
};

}  // namespace orion
