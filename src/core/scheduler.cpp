// Streams, their worker threads, and eval: the graph is walked without
// recursion into a tape (post-order, so each node comes after its inputs),
// the tape is handed to the stream workers in order, and each node drops its
// inputs as soon as it is computed so intermediates are freed as the tape
// advances.
#include "core/scheduler.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "core/array_desc.h"
#include "core/object_pool.h"
#include "core/ops_util.h"
#include "core/primitive.h"
#include "core/transform_util.h"

namespace kiln {
namespace {

// The queue of one stream, served by a thread that exists only while the
// stream has work: it exits after kStreamIdleTimeout without any, and the
// next submission starts a new one. Only one thread serves a stream at a
// time, so its tasks keep their order.
class StreamWorker {
 public:
  explicit StreamWorker(Stream s) : stream_(s) {}

  // One submission is one batch: consecutive nodes of one eval on this
  // stream. A GPU stream hands the whole batch to the backend, which may
  // record it into one CUDA graph.
  // Back-pressure: a submitter waits while the batches queued here and not
  // yet started exceed kMaxQueuedBatches, kMaxQueuedNodes or
  // kMaxQueuedBytes of outputs, so async_eval in a loop cannot queue graphs
  // without bound. A batch is admitted whenever the queue is empty, so one
  // eval of any size runs, and two can overlap (one running, one queued).
  // Every node waits only on nodes submitted before it, so the worker always
  // makes progress while a submitter waits.
  // Returns the batch's ticket: wait_done(ticket) returns once the worker
  // has finished the batch and dropped its handles to the nodes.
  uint64_t submit(std::vector<array>&& nodes) {
    const int64_t count = static_cast<int64_t>(nodes.size());
    size_t bytes = 0;
    for (const auto& n : nodes) bytes += n.nbytes();
    uint64_t ticket = 0;
    {
      std::unique_lock lock(mutex_);
      space_cv_.wait(lock, [&] {
        return queue_.empty() || (static_cast<int>(queue_.size()) < kMaxQueuedBatches &&
                                  queued_nodes_ + count <= kMaxQueuedNodes && queued_bytes_ + bytes <= kMaxQueuedBytes);
      });
      pending_ += count;
      queued_nodes_ += count;
      queued_bytes_ += bytes;
      queue_.push_back({std::move(nodes), bytes});
      ticket = ++submitted_;
      if (!running_) {
        running_ = true;
        std::thread([this] { run(); }).detach();
      }
    }
    cv_.notify_one();
    return ticket;
  }

  void wait_done(uint64_t ticket) {
    std::unique_lock lock(mutex_);
    idle_cv_.wait(lock, [&] { return finished_ >= ticket; });
  }

  void synchronize() {
    std::unique_lock lock(mutex_);
    idle_cv_.wait(lock, [this] { return pending_ == 0; });
  }

  // A synchronous eval whose whole tape is one run on this (CPU) stream
  // runs it on the calling thread when nothing is queued or running here:
  // no hand-off to the worker, and a node's memory is freed by the thread
  // that allocated it, which the C library's per-thread caches serve far
  // faster than frees from another thread (half of a chain of small ops'
  // host time went to malloc and free). The stream stays taken meanwhile,
  // so batches submitted later queue behind this one, as they would behind
  // a batch on the worker.
  bool try_take_inline(int64_t count) {
    std::lock_guard lock(mutex_);
    if (!queue_.empty() || executing_) return false;
    executing_ = true;
    pending_ += count;
    return true;
  }
  void end_inline(int64_t count) {
    {
      std::lock_guard lock(mutex_);
      executing_ = false;
      pending_ -= count;
      if (!queue_.empty() && !running_) {
        running_ = true;
        std::thread([this] { run(); }).detach();
      }
    }
    cv_.notify_one();
    idle_cv_.notify_all();
  }

 private:
  struct Batch {
    std::vector<array> nodes;
    size_t bytes;
  };

  void run() {
    for (;;) {
      Batch batch;
      {
        std::unique_lock lock(mutex_);
        if (!cv_.wait_for(lock, kStreamIdleTimeout, [this] { return !queue_.empty() && !executing_; })) {
          if (!queue_.empty()) continue;  // behind a batch run inline: keep waiting
          running_ = false;               // the thread ends; the next submit starts another
          return;
        }
        executing_ = true;
        batch = std::move(queue_.front());
        queue_.pop_front();
        queued_nodes_ -= static_cast<int64_t>(batch.nodes.size());
        queued_bytes_ -= batch.bytes;
      }
      space_cv_.notify_all();
      const int64_t count = static_cast<int64_t>(batch.nodes.size());
      if (stream_.device.type == Device::gpu) {
        gpu_evaluate_batch(batch.nodes, stream_);
      } else {
        std::vector<array> scratch;
        for (auto& node : batch.nodes) {
          evaluate_node(node, stream_, &scratch);
          // Drop each handle as soon as it is computed, so that the batch
          // does not keep every node of a long chain alive.
          detail::release(node);
        }
      }
      // Drop the handles before counting the tasks done so that their
      // memory is released by the time synchronize or eval returns (eval
      // waits for its batches' tickets: otherwise an output the caller
      // drops right after eval would be freed here, later, and memory
      // counts read after eval would race with this thread).
      batch.nodes.clear();
      std::lock_guard lock(mutex_);
      executing_ = false;
      pending_ -= count;
      ++finished_;  // batches finish in submission order (one thread)
      idle_cv_.notify_all();
    }
  }

  Stream stream_;
  std::mutex mutex_;
  std::condition_variable cv_, idle_cv_, space_cv_;
  std::deque<Batch> queue_;
  int64_t pending_ = 0;       // submitted and not finished
  uint64_t submitted_ = 0;    // batches submitted (the last ticket)
  uint64_t finished_ = 0;     // batches finished
  int64_t queued_nodes_ = 0;  // in queue_ (not started)
  size_t queued_bytes_ = 0;   // outputs of the nodes in queue_
  bool running_ = false;      // a thread serves the queue
  bool executing_ = false;    // a batch is being run (by the worker or inline)
};

class Scheduler {
 public:
  static Scheduler& instance() {
    // Leaked on purpose: detached workers may still run during exit.
    static Scheduler* s = new Scheduler();
    return *s;
  }

  Stream new_stream(Device d) {
    std::lock_guard lock(mutex_);
    Stream s{static_cast<int>(workers_.size()), d};
    streams_.push_back(s);
    workers_.push_back(std::make_unique<StreamWorker>(s));
    return s;
  }
  Stream default_stream(Device d) {
    std::lock_guard lock(mutex_);
    // One default stream per device (each GPU index has its own).
    auto [it, inserted] = default_slots_.try_emplace({static_cast<int>(d.type), d.index}, -1);
    int& slot = it->second;
    if (slot < 0) {
      slot = static_cast<int>(workers_.size());
      Stream s{slot, d};
      streams_.push_back(s);
      workers_.push_back(std::make_unique<StreamWorker>(s));
    }
    return streams_[slot];
  }
  void set_default_stream(const Stream& s) {
    std::lock_guard lock(mutex_);
    if (s.index < 0 || s.index >= static_cast<int>(streams_.size()) || !(streams_[s.index] == s)) {
      throw Error("[set_default_stream] unknown stream index " + std::to_string(s.index));
    }
    default_slots_[{static_cast<int>(s.device.type), s.device.index}] = s.index;
  }
  StreamWorker& worker(const Stream& s) {
    std::lock_guard lock(mutex_);
    if (s.index < 0 || s.index >= static_cast<int>(workers_.size())) {
      throw Error("[stream] unknown stream index " + std::to_string(s.index));
    }
    return *workers_[s.index];
  }
  std::vector<Stream> streams() {
    std::lock_guard lock(mutex_);
    return streams_;
  }
  // Serializes graph walks so that a node is scheduled exactly once.
  std::mutex& schedule_mutex() { return schedule_mutex_; }

  // Read by every op (to_stream) and written by set_default_device from any thread.
  std::atomic<Device> default_device_{Device::cpu};

 private:
  std::mutex mutex_;
  std::mutex schedule_mutex_;
  std::vector<Stream> streams_;
  std::vector<std::unique_ptr<StreamWorker>> workers_;
  std::map<std::pair<int, int>, int> default_slots_;  // (device type, index) -> stream
};

thread_local int tl_keep_graph = 0;

// A node this eval must compute: never scheduled, or failed before. A failed
// node keeps its primitive and inputs, so it is run again (its cause, such
// as the memory limit, may be gone); it and its siblings (which failed with
// it) are reset under their locks, as threads that saw them fail may still
// be reading their error (see node_outcome).
bool needs_run(const array& a) {
  ArrayDesc& d = *a.desc();
  Status s = d.get_status();
  if (s != Status::failed) return s == Status::unscheduled;
  auto reset = [](ArrayDesc& x) {
    NodeLock lock(x);
    x.error.clear();
    x.status.store(static_cast<int>(Status::unscheduled), std::memory_order_relaxed);
  };
  if (!d.siblings) {
    reset(d);
  } else {
    for (const auto& w : d.siblings->descs) {
      if (auto sib = w.lock()) reset(*sib);
    }
  }
  return true;
}

// Post-order of the unscheduled part of the graph, without recursion. The
// siblings of a multi-output node are one task: the first one reached
// stands for all of them.
// Called under schedule's mutex: the walk's marks and its stack (kept, so
// that a long chain does not reallocate it on every eval) are not shared.
std::vector<array> build_tape(const std::vector<array>& outputs) {
  static uint64_t last_walk = 0;
  const uint64_t walk = ++last_walk;
  std::vector<array> tape;
  auto visit = [walk](const array& a) {
    ArrayDesc& d = *a.desc();
    if (d.walk_mark == walk || !needs_run(a)) return false;
    d.walk_mark = walk;
    if (const auto& sib = d.siblings) {
      for (const auto& w : sib->descs) {
        if (auto s = w.lock()) s->walk_mark = walk;
      }
    }
    return true;
  };
  struct Frame {
    array node;
    size_t next_input;
  };
  // Leaked, as the scheduler is: an eval may run during static destruction.
  static auto* kept = new std::vector<Frame>();
  std::vector<Frame>& stack = *kept;
  stack.clear();
  for (const auto& out : outputs) {
    if (!visit(out)) continue;
    stack.push_back({out, 0});
    while (!stack.empty()) {
      Frame& f = stack.back();
      const auto& inputs = f.node.desc()->inputs;
      if (f.next_input < inputs.size()) {
        const array& in = inputs[f.next_input++];
        if (visit(in)) stack.push_back({in, 0});
        continue;
      }
      tape.push_back(std::move(f.node));
      stack.pop_back();
    }
  }
  return tape;
}

void mark_scheduled(ArrayDesc& d, bool keep_graph) {
  auto mark = [keep_graph](ArrayDesc& x) {
    if (keep_graph) x.keep_graph = true;
    x.set_status(Status::scheduled);
  };
  if (!d.siblings) return mark(d);
  for (const auto& w : d.siblings->descs) {
    if (auto s = w.lock()) mark(*s);
  }
}

// What schedule handed over: per batch submitted, its worker and ticket;
// and a run the caller executes itself (see try_take_inline).
struct Scheduled {
  std::vector<std::pair<StreamWorker*, uint64_t>> tickets;
  StreamWorker* inline_worker = nullptr;
  std::vector<array> inline_run;
};

// A tape of one CPU stream only (the common synchronous eval).
bool one_cpu_stream(const std::vector<array>& tape) {
  if (tape.empty()) return false;
  const Stream s = tape[0].desc()->primitive->stream();
  if (s.device.type != Device::cpu) return false;
  for (const auto& n : tape) {
    if (!(n.desc()->primitive->stream() == s)) return false;
  }
  return true;
}

Scheduled schedule(const std::vector<array>& outputs, bool may_run_inline) {
  auto& sched = Scheduler::instance();
  std::lock_guard lock(sched.schedule_mutex());
  std::vector<array> tape = build_tape(outputs);
  Scheduled out;
  auto& tickets = out.tickets;
  const bool keep_graph = tl_keep_graph > 0;
  if (may_run_inline && one_cpu_stream(tape)) {
    StreamWorker& worker = sched.worker(tape[0].desc()->primitive->stream());
    if (worker.try_take_inline(static_cast<int64_t>(tape.size()))) {
      for (auto& n : tape) mark_scheduled(*n.desc(), keep_graph);
      out.inline_worker = &worker;
      out.inline_run = std::move(tape);
      return out;
    }
  }
  // Hand the tape over in runs of consecutive nodes of one stream.
  size_t i = 0;
  while (i < tape.size()) {
    Stream s = tape[i].desc()->primitive->stream();
    StreamWorker& worker = sched.worker(s);  // may throw: before any node is marked
    std::vector<array> run;
    while (i < tape.size() && tape[i].desc()->primitive->stream() == s) {
      mark_scheduled(*tape[i].desc(), keep_graph);
      run.push_back(std::move(tape[i]));
      ++i;
    }
    tickets.emplace_back(&worker, worker.submit(std::move(run)));
  }
  return out;
}

// Runs the tape schedule left to the caller, then gives the stream back.
void run_inline(Scheduled& sch) {
  struct GiveBack {
    StreamWorker* worker;
    int64_t count;
    ~GiveBack() { worker->end_inline(count); }
  } give_back{sch.inline_worker, static_cast<int64_t>(sch.inline_run.size())};
  const Stream stream = sch.inline_run[0].desc()->primitive->stream();
  std::vector<array> scratch;
  for (auto& node : sch.inline_run) {
    evaluate_node(node, stream, &scratch);
    detail::release(node);
  }
  sch.inline_run.clear();
}

void check_handles(const std::vector<array>& outputs, const char* op) {
  for (const auto& out : outputs) {
    if (!out.desc()) {
      throw Error(std::string("[") + op + "] an array handle is empty (it was moved from); assign it an array first");
    }
  }
}

}  // namespace

// Waits until a node is computed; returns "" when it is available, else its
// error. Another thread's eval may re-run a failed node meanwhile: then this
// waits for that run.
std::string node_outcome(const ArrayDesc& d) {
  for (;;) {
    d.wait();
    NodeLock lock(d);
    Status s = d.get_status();
    if (s == Status::available) return {};
    if (s == Status::failed) return d.error;
  }
}

bool wait_for_inputs(ArrayDesc& d, const std::vector<const ArrayDesc*>* same_batch) {
  for (const auto& in : d.inputs) {
    if (same_batch && std::binary_search(same_batch->begin(), same_batch->end(), in.desc().get())) continue;
    std::string error = node_outcome(*in.desc());
    if (!error.empty() && d.error.empty()) d.error = std::move(error);
  }
  return d.error.empty();
}

std::vector<array> node_outputs(const array& node) {
  const auto& sib = node.desc()->siblings;
  if (!sib) return {node};
  std::vector<array> outs;
  for (size_t i = 0; i < sib->descs.size(); ++i) {
    if (auto d = sib->descs[i].lock()) {
      outs.push_back(array(std::move(d), detail::DescTag{}));
    } else {
      // Nobody holds this output: the kernel still writes it, to scratch.
      outs.push_back(array(detail::make_pooled<ArrayDesc>(sib->shapes[i], sib->dtypes[i]), detail::DescTag{}));
    }
  }
  return outs;
}

std::vector<array> inputs_to_hold(const ArrayDesc& d) { return d.inputs; }

void finish_node(array& node) {
  ArrayDesc& d = *node.desc();
  const std::string error = d.error;
  auto publish = [&error](ArrayDesc& x) {
    if (!error.empty()) {
      // Keeps primitive and inputs: a later eval runs the node again.
      x.error = error;
      x.buffer.reset();
      x.set_status(Status::failed);
      return;
    }
    if (!x.keep_graph) {
      // Detached under the node's lock (other threads may be inspecting
      // it); the inputs and primitive are released after it.
      std::vector<array> inputs;
      std::shared_ptr<Primitive> primitive;
      NodeLock lock(x);
      inputs.swap(x.inputs);
      primitive.swap(x.primitive);
    }
    x.set_status(Status::available);
  };
  if (!d.siblings) return publish(d);
  // Keep the siblings alive while they are published.
  std::vector<std::shared_ptr<ArrayDesc>> live;
  for (const auto& w : d.siblings->descs) {
    if (auto s = w.lock()) live.push_back(std::move(s));
  }
  for (auto& s : live) publish(*s);
}

void evaluate_node(array& node, const Stream& stream, std::vector<array>* scratch) {
  ArrayDesc& d = *node.desc();
  if (wait_for_inputs(d, nullptr)) {
    try {
      if (stream.device.type == Device::cpu && scratch && !d.siblings) {
        // The usual CPU node: its one output in the caller's vector, which
        // keeps its capacity from node to node (no allocation per node).
        scratch->assign(1, node);
        d.primitive->eval_cpu(d.inputs, *scratch);
      } else if (stream.device.type == Device::cpu) {
        std::vector<array> outputs = node_outputs(node);
        d.primitive->eval_cpu(d.inputs, outputs);
      } else {
        std::vector<array> outputs = node_outputs(node);
        // eval_gpu only enqueues kernels; gpu_end_node records the event
        // consumers wait on and holds the inputs until the kernels ran.
        gpu_begin_node(stream);
        d.primitive->eval_gpu(d.inputs, outputs);
        // A sibling nobody holds was given a scratch output: it is held
        // too, until the kernels that write it ran.
        std::vector<array> held = inputs_to_hold(d);
        if (d.siblings) held.insert(held.end(), outputs.begin(), outputs.end());
        gpu_end_node(stream, std::move(held));
      }
    } catch (const std::exception& e) {
      d.error = e.what();
    }
    if (scratch) scratch->clear();
  }
  finish_node(node);
}

KeepGraphScope::KeepGraphScope() { ++tl_keep_graph; }
KeepGraphScope::~KeepGraphScope() { --tl_keep_graph; }
bool KeepGraphScope::active() { return tl_keep_graph > 0; }

void eval(std::vector<array> outputs) {
  check_handles(outputs, "eval");
  Scheduled sch = schedule(outputs, true);
  if (sch.inline_worker) run_inline(sch);
  for (auto [worker, ticket] : sch.tickets) worker->wait_done(ticket);
  for (const auto& out : outputs) {
    std::string error = node_outcome(*out.desc());
    if (!error.empty()) throw Error(error);
    // A GPU result is computed asynchronously: wait for its kernels too.
    gpu_wait_ready(out);
  }
}

void async_eval(std::vector<array> outputs) {
  check_handles(outputs, "async_eval");
  (void)schedule(outputs, false);
}

bool is_available(const Device& d) {
  if (d.type == Device::cpu) return d.index == 0;
  return gpu_available() && d.index >= 0 && d.index < gpu_count();
}
Device default_device() { return Scheduler::instance().default_device_.load(std::memory_order_relaxed); }
void set_default_device(const Device& d) {
  if (!is_available(d)) {
    throw Error(std::string("[set_default_device] ") + device_unavailable_reason(d));
  }
  Scheduler::instance().default_device_.store(d, std::memory_order_relaxed);
}
Stream default_stream(Device d) {
  if (!is_available(d)) throw Error(std::string("[default_stream] ") + device_unavailable_reason(d));
  return Scheduler::instance().default_stream(d);
}
void set_default_stream(Stream s) { Scheduler::instance().set_default_stream(s); }

StreamContext::StreamContext(StreamOrDevice s)
    : previous_device_(default_device()), previous_stream_(default_stream(to_stream(s).device)) {
  if (std::holds_alternative<std::monostate>(s)) {
    throw Error("[StreamContext] needs a stream or a device");
  }
  Stream st = to_stream(s);
  set_default_device(st.device);
  set_default_stream(st);
}

StreamContext::~StreamContext() {
  set_default_stream(previous_stream_);
  set_default_device(previous_device_);
}

Stream new_stream(Device d) {
  if (!is_available(d)) throw Error(std::string("[new_stream] ") + device_unavailable_reason(d));
  return Scheduler::instance().new_stream(d);
}
Stream to_stream(StreamOrDevice s) {
  if (std::holds_alternative<Stream>(s)) return std::get<Stream>(s);
  if (std::holds_alternative<std::monostate>(s)) {
    if (auto r = detail::rule_stream()) return *r;
  }
  Device d = std::holds_alternative<Device>(s) ? std::get<Device>(s) : default_device();
  return default_stream(d);
}
void synchronize(Stream s) {
  Scheduler::instance().worker(s).synchronize();
  if (s.device.type == Device::gpu) gpu_synchronize(s);
}
void synchronize() {
  for (const auto& s : Scheduler::instance().streams()) synchronize(s);
}

}  // namespace kiln
