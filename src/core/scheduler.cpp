// Streams, their worker threads, and eval: the graph is walked without
// recursion into a tape (post-order, so each node comes after its inputs),
// the tape is handed to the stream workers in order, and each node drops its
// inputs as soon as it is computed so intermediates are freed as the tape
// advances.
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_set>

#include "core/array_desc.h"
#include "core/ops_util.h"
#include "core/primitive.h"
#include "core/scheduler.h"
#include "core/transform_util.h"

namespace kiln {
namespace {

class StreamWorker {
 public:
  explicit StreamWorker(Stream s) : stream_(s), thread_([this] { run(); }) { thread_.detach(); }

  // One submission is one batch: consecutive nodes of one eval on this
  // stream. A GPU stream hands the whole batch to the backend, which may
  // record it into one CUDA graph.
  void submit(std::vector<array>&& nodes) {
    {
      std::lock_guard lock(mutex_);
      pending_ += static_cast<int64_t>(nodes.size());
      queue_.push_back(std::move(nodes));
    }
    cv_.notify_one();
  }

  void synchronize() {
    std::unique_lock lock(mutex_);
    idle_cv_.wait(lock, [this] { return pending_ == 0; });
  }

 private:
  void run() {
    for (;;) {
      std::vector<array> batch;
      {
        std::unique_lock lock(mutex_);
        cv_.wait(lock, [this] { return !queue_.empty(); });
        batch = std::move(queue_.front());
        queue_.pop_front();
      }
      const int64_t count = static_cast<int64_t>(batch.size());
      if (stream_.device.type == Device::gpu) {
        gpu_evaluate_batch(batch, stream_);
      } else {
        for (auto& node : batch) {
          evaluate_node(node, stream_);
          // Drop each handle as soon as it is computed, so that the batch
          // does not keep every node of a long chain alive.
          node = array(std::shared_ptr<ArrayDesc>());
        }
      }
      // Drop the handles before counting the tasks done so that their
      // memory is released by the time synchronize returns.
      batch.clear();
      std::lock_guard lock(mutex_);
      pending_ -= count;
      if (pending_ == 0) idle_cv_.notify_all();
    }
  }

  Stream stream_;
  std::mutex mutex_;
  std::condition_variable cv_, idle_cv_;
  std::deque<std::vector<array>> queue_;
  int64_t pending_ = 0;
  std::thread thread_;
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

  Device default_device_{Device::cpu};

 private:
  std::mutex mutex_;
  std::mutex schedule_mutex_;
  std::vector<Stream> streams_;
  std::vector<std::unique_ptr<StreamWorker>> workers_;
  std::map<std::pair<int, int>, int> default_slots_;  // (device type, index) -> stream
};

thread_local int tl_keep_graph = 0;

// Post-order of the unscheduled part of the graph, without recursion. The
// siblings of a multi-output node are one task: the first one reached
// stands for all of them.
std::vector<array> build_tape(const std::vector<array>& outputs) {
  std::vector<array> tape;
  std::unordered_set<const ArrayDesc*> seen;
  auto visit = [&seen](const array& a) {
    if (a.desc()->get_status() != Status::unscheduled || !seen.insert(a.desc().get()).second) return false;
    if (const auto& sib = a.desc()->siblings) {
      for (const auto& w : sib->descs) {
        if (auto d = w.lock()) seen.insert(d.get());
      }
    }
    return true;
  };
  struct Frame {
    array node;
    size_t next_input;
  };
  std::vector<Frame> stack;
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

void schedule(const std::vector<array>& outputs) {
  auto& sched = Scheduler::instance();
  std::lock_guard lock(sched.schedule_mutex());
  std::vector<array> tape = build_tape(outputs);
  const bool keep_graph = tl_keep_graph > 0;
  // Hand the tape over in runs of consecutive nodes of one stream.
  size_t i = 0;
  while (i < tape.size()) {
    Stream s = tape[i].primitive()->stream();
    StreamWorker& worker = sched.worker(s);  // may throw: before any node is marked
    std::vector<array> run;
    while (i < tape.size() && tape[i].primitive()->stream() == s) {
      mark_scheduled(*tape[i].desc(), keep_graph);
      run.push_back(std::move(tape[i]));
      ++i;
    }
    worker.submit(std::move(run));
  }
}

}  // namespace

bool wait_for_inputs(ArrayDesc& d, const std::unordered_set<const ArrayDesc*>* same_batch) {
  for (const auto& in : d.inputs) {
    if (same_batch && same_batch->count(in.desc().get())) continue;
    in.desc()->wait();
    if (in.desc()->get_status() == Status::failed && d.error.empty()) d.error = in.desc()->error;
  }
  return d.error.empty();
}

std::vector<array> node_outputs(const array& node) {
  const auto& sib = node.desc()->siblings;
  if (!sib) return {node};
  std::vector<array> outs;
  for (size_t i = 0; i < sib->descs.size(); ++i) {
    if (auto d = sib->descs[i].lock()) {
      outs.push_back(array(std::move(d)));
    } else {
      // Nobody holds this output: the kernel still writes it, to scratch.
      outs.push_back(array(std::make_shared<ArrayDesc>(sib->shapes[i], sib->dtypes[i])));
    }
  }
  return outs;
}

std::vector<array> release_inputs(ArrayDesc& d) {
  if (d.keep_graph) return d.inputs;
  return std::move(d.inputs);
}

void finish_node(array& node) {
  ArrayDesc& d = *node.desc();
  const std::string error = d.error;
  auto publish = [&error](ArrayDesc& x) {
    bool failed = !error.empty();
    if (failed) {
      x.error = error;
      x.buffer.reset();
    }
    if (!x.keep_graph) {
      x.inputs.clear();
      x.primitive.reset();
    }
    x.set_status(failed ? Status::failed : Status::available);
  };
  if (!d.siblings) return publish(d);
  // Keep the siblings alive while they are published.
  std::vector<std::shared_ptr<ArrayDesc>> live;
  for (const auto& w : d.siblings->descs) {
    if (auto s = w.lock()) live.push_back(std::move(s));
  }
  for (auto& s : live) publish(*s);
}

void evaluate_node(array& node, const Stream& stream) {
  ArrayDesc& d = *node.desc();
  if (wait_for_inputs(d, nullptr)) {
    try {
      std::vector<array> outputs = node_outputs(node);
      if (stream.device.type == Device::cpu) {
        d.primitive->eval_cpu(d.inputs, outputs);
      } else {
        // eval_gpu only enqueues kernels; gpu_end_node records the event
        // consumers wait on and holds the inputs until the kernels ran.
        gpu_begin_node(stream);
        d.primitive->eval_gpu(d.inputs, outputs);
        gpu_end_node(stream, release_inputs(d));
      }
    } catch (const std::exception& e) {
      d.error = e.what();
    }
  }
  finish_node(node);
}

KeepGraphScope::KeepGraphScope() { ++tl_keep_graph; }
KeepGraphScope::~KeepGraphScope() { --tl_keep_graph; }
bool KeepGraphScope::active() { return tl_keep_graph > 0; }

void eval(std::vector<array> outputs) {
  schedule(outputs);
  for (const auto& out : outputs) {
    out.desc()->wait();
    if (out.desc()->get_status() == Status::failed) {
      throw Error(out.desc()->error);
    }
    // A GPU result is computed asynchronously: wait for its kernels too.
    gpu_wait_ready(out);
  }
}

void async_eval(std::vector<array> outputs) { schedule(outputs); }

bool is_available(const Device& d) {
  if (d.type == Device::cpu) return d.index == 0;
  return gpu_available() && d.index >= 0 && d.index < gpu_count();
}
Device default_device() { return Scheduler::instance().default_device_; }
void set_default_device(const Device& d) {
  if (!is_available(d)) {
    throw Error(std::string("[set_default_device] ") + device_unavailable_reason(d));
  }
  Scheduler::instance().default_device_ = d;
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
