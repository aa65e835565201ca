#pragma once
// Replaying a recorded batch without recording it again: the eager host
// cost of a repeated step (issue 14).
//
// An executable CUDA graph bakes in what its kernels were given: device
// addresses, host scalars passed by value, scratch buffers. While a batch is
// captured, a PlanRecorder notes each of these in the order the nodes asked
// for them (in_ptr, out_ptr, host_scalar and scratch report here), with
// where every output's buffer came from. When the same batch comes again
// (same signature, equivalent primitives, same tf32 and block-format x
// settings), the encoder gives each output the buffer the plan kept from
// last time, asks for the same pointers and scalars in the same order, and
// when every one matches it launches the executable as it is: no eval_gpu,
// no capture, no cudaGraphExecUpdate. What a replay cannot re-check makes
// the plan not replayable, and that batch is recorded every time as before:
// an upload or a cross-stream wait recorded into the graph, a pointer to an
// array that is not the node's own input or output. An output written into
// an input's buffer (donated) replays only when that input is again held by
// nothing but this node and work queued earlier on the same stream
// (can_donate, cuda_common.h).
//
// Index checks (a gather's error slot, cuda_common.h): the plan keeps the
// slots its kernels write. A replay clears each slot and registers the
// check again, which needs the previous run of the same executable checked
// first: a replay whose slots are still in flight tries another variant,
// records a new one while there is room, and else waits for that run.
//
// Buffers: a plan keeps its nodes' own outputs and scratch buffers (only
// once its batch has been recorded twice, so a one-off graph keeps nothing;
// at most kPlanKeepBytes). A kept buffer is reused only when nothing but
// the plan and in-flight records of the same stream hold it: nobody can read
// it any more, and the kernels that use it last are queued earlier on the
// stream that writes it again.
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/cuda/cuda_common.h"
#include "core/allocator.h"
#include "core/array_desc.h"
#include "core/primitive.h"

namespace kiln::cuda {

inline constexpr size_t kPlanKeepBytes = size_t{256} << 20;

struct PlanAccess {
  enum Kind : uint8_t { kIn, kOut, kScalar, kScratch };
  Kind kind = kIn;
  bool found = false;  // kScalar: host_scalar's answer
  uint32_t node = 0;   // index in the batch
  uint32_t slot = 0;   // input or output index; kScratch: index into Plan::scratch
  const void* ptr = nullptr;
  uint64_t value = 0;  // kScalar: the scalar's bytes
};

struct PlanOutput {
  int alias = -1;        // the input whose buffer this output shares (a view); -1: its own buffer
  bool donated = false;  // alias and written: the input's buffer was free to take over
  size_t bytes = 0;
  Strides strides;
  int64_t offset = 0;  // own buffer: the offset; alias: the offset past the input's
  std::shared_ptr<Buffer> kept;
};

struct Plan {
  bool replayable = true;
  const char* why_not = nullptr;  // what made it not replayable (KILN_VERBOSE prints it)
  uint32_t why_node = 0;          // where: the node's index and primitive
  const char* why_prim = "";
  bool tf32 = false;
  bool block_x_int8 = false;  // the kernels a block-format QMV picked (cpu::block_x_int8)
  bool keep = false;          // keep the buffers (the batch has been recorded before)
  std::vector<std::shared_ptr<Primitive>> prims;
  std::vector<std::vector<PlanOutput>> outputs;  // per node, per output
  std::vector<PlanAccess> log;
  std::vector<std::shared_ptr<Buffer>> scratch;
  std::vector<IndexCheck> checks;  // the index slots its kernels write, each cleared by a replay
};

// Installs itself as this thread's recorder for the lifetime of a capture.
class PlanRecorder {
 public:
  explicit PlanRecorder(Plan& plan);
  ~PlanRecorder();
  PlanRecorder(const PlanRecorder&) = delete;
  PlanRecorder& operator=(const PlanRecorder&) = delete;
  // Around one node's eval_gpu: `outputs` as handed to it.
  void begin_node(uint32_t index, const ArrayDesc& node, const std::vector<array>& outputs);
  void end_node();

  Plan& plan;
  uint32_t node = 0;
  size_t node_log = 0;  // where the current node's entries of plan.log begin
  const ArrayDesc* desc = nullptr;
  const std::vector<array>* outputs = nullptr;
};

// After the capture: drops the kept buffers when the plan may not keep them
// (!plan.keep, or more than kPlanKeepBytes), and everything when the plan
// is not replayable.
void finish_plan(Plan& plan);

// Hooks for the backend's pointer functions: no-ops unless a capture on this
// thread is recording a plan.
void plan_in(const array& a, const void* p);
void plan_out(const array& a, const void* p);
void plan_scalar(const array& a, bool found, const void* value);
void plan_scratch(const std::shared_ptr<Buffer>& b);
void plan_check(const IndexCheck& c);
void plan_unreplayable(const char* why);
// Marks `plan` not replayable for the reason `why` (kept: the first one).
void refuse(Plan& plan, const char* why);
// KILN_VERBOSE: says on stderr why a batch was recorded instead of replayed
// (the first 50 times in the process): the reason, the node (its index in
// the batch and its primitive) and, for a pointer or scalar, which input or
// output (`slot`, -1: none).
void explain_recording(const char* why, size_t node, const char* prim, int slot = -1);
// How many messages of one KILN_VERBOSE kind to print: KILN_VERBOSE_LIMIT
// when set (a decode loop's reasons come after the model build's), else
// `fallback`.
long verbose_limit(long fallback);

}  // namespace kiln::cuda
