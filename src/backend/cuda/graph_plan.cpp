// Recording a batch's plan while it is captured (graph_plan.h says what a
// plan is and when a replay may use it).
#include "backend/cuda/graph_plan.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace kiln::cuda {
namespace {

thread_local PlanRecorder* tl_recorder = nullptr;

// The index of `a` among the current node's inputs (by identity), or -1.
int input_index(const PlanRecorder& r, const array& a) {
  const auto& ins = r.desc->inputs;
  for (size_t k = 0; k < ins.size(); ++k) {
    if (ins[k].desc().get() == a.desc().get()) return static_cast<int>(k);
  }
  return -1;
}

int output_index(const PlanRecorder& r, const array& a) {
  for (size_t k = 0; k < r.outputs->size(); ++k) {
    if ((*r.outputs)[k].desc().get() == a.desc().get()) return static_cast<int>(k);
  }
  return -1;
}

}  // namespace

void refuse(Plan& plan, const char* why) {
  if (plan.replayable) {
    plan.why_not = why;
    plan.why_node = tl_recorder && &tl_recorder->plan == &plan ? tl_recorder->node : 0;
    plan.why_prim = tl_recorder && tl_recorder->desc ? tl_recorder->desc->primitive->name() : "";
  }
  plan.replayable = false;
}

long verbose_limit(long fallback) {
  static const char* limit = std::getenv("KILN_VERBOSE_LIMIT");
  return limit ? std::atol(limit) : fallback;
}

void explain_recording(const char* why, size_t node, const char* prim, int slot) {
  static const bool verbose = std::getenv("KILN_VERBOSE") != nullptr;
  static std::atomic<long> told{0};
  if (!verbose || told.fetch_add(1) >= verbose_limit(50)) return;
  if (slot >= 0) {
    std::fprintf(stderr, "kiln: CUDA graph recorded again, not replayed: %s (node %zu of the batch, %s, slot %d)\n",
                 why, node, prim, slot);
  } else {
    std::fprintf(stderr, "kiln: CUDA graph recorded again, not replayed: %s (node %zu of the batch, %s)\n", why, node,
                 prim);
  }
}

PlanRecorder::PlanRecorder(Plan& p) : plan(p) { tl_recorder = this; }
PlanRecorder::~PlanRecorder() { tl_recorder = nullptr; }

void PlanRecorder::begin_node(uint32_t index, const ArrayDesc& d, const std::vector<array>& outs) {
  node = index;
  node_log = plan.log.size();
  desc = &d;
  outputs = &outs;
  if (plan.replayable) plan.prims.push_back(d.primitive);
}

void PlanRecorder::end_node() {
  if (!plan.replayable) {  // nothing more to note (a decode step refused early costs a branch per hook)
    desc = nullptr;
    outputs = nullptr;
    return;
  }
  std::vector<PlanOutput> outs;
  for (const auto& o : *outputs) {
    const ArrayDesc& od = *o.desc();
    PlanOutput po;
    if (!od.buffer) {
      refuse(plan, "an output without a buffer");
      outs.push_back(std::move(po));
      continue;
    }
    for (size_t k = 0; k < desc->inputs.size(); ++k) {
      if (desc->inputs[k].desc()->buffer == od.buffer) {
        po.alias = static_cast<int>(k);
        break;
      }
    }
    po.strides = od.strides;
    // A view's offset follows its input's (which the signature leaves out).
    po.offset = po.alias >= 0 ? od.offset - desc->inputs[po.alias].desc()->offset : od.offset;
    po.bytes = od.buffer->size();
    if (po.alias < 0) po.kept = od.buffer;
    outs.push_back(std::move(po));
  }
  // An output written into an input's buffer was donated (a replay checks
  // that the input is free to take over again). An own buffer the kernels
  // did not write came from somewhere the plan cannot see.
  std::vector<bool> written(outs.size(), false);
  for (size_t i = node_log; i < plan.log.size(); ++i) {
    const PlanAccess& a = plan.log[i];
    if (a.kind != PlanAccess::kOut) continue;
    written[a.slot] = true;
    if (outs[a.slot].alias >= 0) outs[a.slot].donated = true;
  }
  for (size_t k = 0; k < outs.size(); ++k) {
    if (outs[k].alias < 0 && !written[k]) refuse(plan, "an output buffer the kernels did not write");
  }
  plan.outputs.push_back(std::move(outs));
  desc = nullptr;
  outputs = nullptr;
}

void finish_plan(Plan& plan) {
  size_t bytes = 0;
  for (auto& node : plan.outputs) {
    for (auto& o : node) {
      if (o.kept) bytes += o.bytes;
    }
  }
  for (const auto& b : plan.scratch) bytes += b->size();
  // Scratch addresses are baked into the graph: without them kept, the
  // plan cannot be replayed.
  if (!plan.keep || bytes > kPlanKeepBytes) {
    for (auto& node : plan.outputs) {
      for (auto& o : node) o.kept.reset();
    }
    if (!plan.scratch.empty()) refuse(plan, "scratch buffers not kept");
    plan.scratch.clear();
  }
  if (!plan.replayable) {
    plan.log.clear();
    plan.outputs.clear();
    plan.prims.clear();
    plan.scratch.clear();
    plan.checks.clear();
  }
}

namespace {
// The recorder of the node being captured (nullptr: none) and the index of
// `a` among that node's inputs or outputs; a pointer or value for anything
// else cannot be checked by a replay: the plan is refused.
PlanRecorder* recording(const array& a, bool output, uint32_t& slot, const char* why) {
  PlanRecorder* r = tl_recorder;
  if (!r || !r->desc || !r->plan.replayable) return nullptr;
  const int k = output ? output_index(*r, a) : input_index(*r, a);
  if (k < 0) {
    refuse(r->plan, why);
    return nullptr;
  }
  slot = static_cast<uint32_t>(k);
  return r;
}
}  // namespace

void plan_in(const array& a, const void* p) {
  uint32_t k = 0;
  if (PlanRecorder* r = recording(a, false, k, "a pointer to an array that is not one of the node's inputs")) {
    r->plan.log.push_back({PlanAccess::kIn, false, r->node, k, p, 0});
  }
}

void plan_out(const array& a, const void* p) {
  uint32_t k = 0;
  if (PlanRecorder* r = recording(a, true, k, "a written array that is not one of the node's outputs")) {
    r->plan.log.push_back({PlanAccess::kOut, false, r->node, k, p, 0});
  }
}

void plan_scalar(const array& a, bool found, const void* value) {
  uint32_t k = 0;
  if (PlanRecorder* r = recording(a, false, k, "a host scalar that is not one of the node's inputs")) {
    uint64_t v = 0;
    if (found) std::memcpy(&v, value, size_of(a.dtype()));
    r->plan.log.push_back({PlanAccess::kScalar, found, r->node, k, nullptr, v});
  }
}

namespace {
// The recorder of the node being captured, for something a plan keeps
// (nullptr: no plan is recorded, or it is refused already); outside a node
// the plan is refused for `outside`.
PlanRecorder* keeping(const char* outside) {
  PlanRecorder* r = tl_recorder;
  if (!r || !r->plan.replayable) return nullptr;
  if (!r->desc) {
    refuse(r->plan, outside);
    return nullptr;
  }
  return r;
}
}  // namespace

void plan_scratch(const std::shared_ptr<Buffer>& b) {
  if (PlanRecorder* r = keeping("a scratch buffer outside a node")) {
    r->plan.log.push_back(
        {PlanAccess::kScratch, false, r->node, static_cast<uint32_t>(r->plan.scratch.size()), b->device_raw(), 0});
    r->plan.scratch.push_back(b);
  }
}

void plan_check(const IndexCheck& c) {
  if (PlanRecorder* r = keeping("an index check outside a node")) r->plan.checks.push_back(c);
}

void plan_unreplayable(const char* why) {
  if (PlanRecorder* r = tl_recorder) refuse(r->plan, why);
}

}  // namespace kiln::cuda
